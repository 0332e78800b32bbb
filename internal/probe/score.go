package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Score is one boundary's tally. Skipped probes are neither passes nor failures.
type Score struct {
	Boundary Boundary `json:"boundary"`
	Passed   int      `json:"passed"`
	Failed   int      `json:"failed"`
	Skipped  int      `json:"skipped"`
}

// Scorecard is the machine-readable report: every result and the score per boundary.
type Scorecard struct {
	// Tier is the isolation tier the probes ran in (native, gvisor); Kernel says what answered
	// their system calls there, which is where the tiers differ. Both empty for a bare probe run.
	Tier    string   `json:"tier,omitempty"`
	Kernel  string   `json:"kernel,omitempty"`
	Results []Result `json:"results"`
	Scores  []Score  `json:"scores"`
	// OK is true only when no probe failed.
	OK bool `json:"ok"`
}

// NewScorecard tallies results.
func NewScorecard(results []Result) Scorecard {
	results = Sorted(results)
	sc := Scorecard{Results: results, OK: !Failed(results)}
	for _, b := range Boundaries {
		s := Score{Boundary: b}
		for _, r := range results {
			if r.Boundary != b {
				continue
			}
			switch r.Status {
			case Pass:
				s.Passed++
			case Fail:
				s.Failed++
			default:
				s.Skipped++
			}
		}
		if s.Passed+s.Failed+s.Skipped > 0 {
			sc.Scores = append(sc.Scores, s)
		}
	}
	return sc
}

// WriteJSON writes the scorecard as one JSON document.
func (sc Scorecard) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sc); err != nil {
		return fmt.Errorf("writing the scorecard: %w", err)
	}
	return nil
}

// ReadJSON reads a scorecard written by WriteJSON (by a probe run inside a sandbox), refusing
// unknown verdicts so a garbled report cannot pass.
func ReadJSON(b []byte) (Scorecard, error) {
	var sc Scorecard
	if err := json.Unmarshal(b, &sc); err != nil {
		return Scorecard{}, fmt.Errorf("reading the probes' report: %w", err)
	}
	if len(sc.Results) == 0 {
		return Scorecard{}, fmt.Errorf("reading the probes' report: no results")
	}
	for _, r := range sc.Results {
		if r.Status != Pass && r.Status != Fail && r.Status != Skip {
			return Scorecard{}, fmt.Errorf("reading the probes' report: probe %q has verdict %q", r.ID, r.Status)
		}
	}
	return sc, nil
}

// WriteTable writes the human scorecard: one row per probe, failures with their evidence below the
// row, then the score per boundary and the overall verdict.
func (sc Scorecard) WriteTable(w io.Writer) error {
	if sc.Tier != "" {
		fmt.Fprintf(w, "tier: %s (system calls answered by %s)\n\n", sc.Tier, sc.Kernel)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBOUNDARY\tTRIED\tRESULT")
	for _, r := range sc.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Boundary, r.Tried, r.Status)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the scorecard: %w", err)
	}
	var notes strings.Builder
	for _, r := range sc.Results {
		if r.Status == Pass || r.Evidence == "" {
			continue
		}
		label := "evidence"
		if r.Status == Skip {
			label = "skipped"
		}
		fmt.Fprintf(&notes, "  %s %s %s: %s\n", r.Status, r.ID, label, indent(r.Evidence))
	}
	if notes.Len() > 0 {
		fmt.Fprintf(w, "\n%s", notes.String())
	}
	fmt.Fprintln(w)
	for _, s := range sc.Scores {
		fmt.Fprintf(w, "%-12s %d/%d passed", s.Boundary, s.Passed, s.Passed+s.Failed)
		if s.Skipped > 0 {
			fmt.Fprintf(w, " (%d skipped, not counted)", s.Skipped)
		}
		fmt.Fprintln(w)
	}
	if sc.OK {
		_, err := fmt.Fprintln(w, "\nno probe escaped")
		return err
	}
	_, err := fmt.Fprintln(w, "\nFAIL: at least one probe escaped the boundary (see the evidence above)")
	return err
}

func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ")
}
