// Command cocoonbox-agent is the agent resident in every box: `cocoonbox-agent serve` answers the
// control plane's gRPC calls (agent steps, exec, info) behind the per-box credential.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/tools"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cocoonbox-agent:", err)
		os.Exit(1)
	}
}

const usage = `usage: cocoonbox-agent <command> [flags]

commands:
  serve     serve the agent's gRPC API
  version   print the agent's version
`

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "version", "--version", "-version":
		fmt.Println(agentvm.Version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7070", "address to listen on")
	credFile := fs.String("credential-file", "", "file holding the per-box credential (default: $"+agentvm.CredentialEnv+")")
	journalDir := fs.String("journal", agentvm.DefaultJournalDir, "directory of the step journal")
	workDir := fs.String("dir", "", "working directory of the tools (default: the agent's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	cred, err := agentvm.LoadCredential(*credFile)
	if err != nil {
		return err
	}
	journal, err := agentvm.OpenJournal(*journalDir)
	if err != nil {
		return err
	}
	loop := &agentvm.Loop{Tools: append([]tools.Tool{tools.Shell{Dir: *workDir}}, tools.Files(*workDir)...)}
	srv, err := agentvm.NewServer(agentvm.Config{Credential: cred, Loop: loop, Journal: journal, Logger: log})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		log.Info("stopping")
		srv.Stop()
	}()
	log.Info("serving", "addr", lis.Addr().String(), "version", agentvm.Version, "journal", *journalDir)
	return srv.Serve(lis)
}
