package main

import (
	"strings"
	"testing"
)

func TestParseAndSummarize(t *testing.T) {
	stderr := strings.Join([]string{
		"cordon-trace 10.000000000 500 main",
		"cordon: a warning the run printed",
		"cordon-trace 10.001000000 500 launch",
		"cordon-trace 10.004000000 1 main",
		"cordon-trace 10.002000000 500 launched",
		"cordon-trace 10.005000000 1 signals caught",
		"cordon-trace 10.009000000 500 exit",
	}, "\n")
	r, err := parse([]byte(stderr))
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 6 || r[2].step != "launched" || !r[3].init {
		t.Fatalf("marks out of order or misread: %+v", r)
	}
	got := summarize([]run{r})
	for step, want := range map[string][2]float64{
		"cordon main":           {0, 0},
		"cordon launched":       {2, 1},
		"init   main":           {4, 3}, // counted from cordon's launch
		"init   signals caught": {5, 1},
		"cordon exit":           {9, 7},
	} {
		st, ok := got[step]
		if !ok || len(st.at) != 1 || !near(st.at[0], want[0]) || !near(st.since[0], want[1]) {
			t.Errorf("%s: %+v, want at %v since %v", step, st, want[0], want[1])
		}
	}
	if _, err := parse([]byte("cordon: no changes\n")); err == nil {
		t.Error("an untraced run's output was taken for marks")
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
