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
		e := &events[i]
		n := e.Decisions()
		if e.Kind == KindSSHAgent {
			if e.Decision == Allow {
				s.AgentSignatures += n
			} else {
				s.AgentRefusals += n
			}
			continue
		}
		switch e.Decision {
		case Allow:
			s.Allowed += n
		case Deny:
			s.Denied += n
		}
		if e.Kind != KindHTTP {
			s.BytesIn += e.BytesIn
			s.BytesOut += e.BytesOut
		}
		if e.Detail[DetailCredentials] != "" {
			s.CredentialUses++
		}
		if e.Detail[DetailCredentialMisuse] != "" {
			s.Misuses++
		}
		if e.Detail[DetailCredentialEchoed] != "" {
			s.Echoes++
		}
	}
	return s, nil
}

// FileName is a run's audit log in its directory.
const FileName = "audit.jsonl"
