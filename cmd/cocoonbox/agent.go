package main

import (
	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// agentCommand groups the commands on a box's resident agent: give it a task, follow it, talk to
// it, stop it. Runs are named by their ID (run_…), boxes as everywhere else.
func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "give a box's agent tasks and follow its runs",
		Subcommands: []*cli.Command{
			agentRunCommand(),
			agentAskCommand(),
			agentWatchCommand(),
			agentLsCommand(),
			agentShowCommand(),
			agentSayCommand(),
			agentCancelCommand(),
			agentAcceptCommand(),
			agentDiscardCommand(),
		},
		Action: groupAction,
	}
}

// agentClient opens a session for an agent command.
func agentClient(c *cli.Context) (*session, cbv1.AgentServiceClient, error) {
	s, err := open(c)
	if err != nil {
		return nil, nil, err
	}
	return s, cbv1.NewAgentServiceClient(s.conn), nil
}

// runEnded says whether a run is in a final state.
func runEnded(r *cbv1.AgentRun) bool {
	switch r.GetState() {
	case "succeeded", "failed", "cancelled":
		return true
	}
	return false
}
