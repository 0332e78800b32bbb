package main

func (a *app) kubeInPod(name string, args []string) (int, bool) { return 0, false }
