package audit

// SummarizeFile adds up a finished audit log as the log's own Summary would have (a fold counts
// every decision it stands for): for a log written elsewhere, such as a Kubernetes pod's gateway,
// and read back here.
func SummarizeFile(path string) (Summary, error) {
	events, err := Read(path)
	if err != nil {
		return Summary{}, err
	}
	var s Summary
	for i := range events {
		s.add(&events[i], events[i].Decisions())
	}
	return s, nil
}

// FileName is a run's audit log in its directory.
const FileName = "audit.jsonl"
