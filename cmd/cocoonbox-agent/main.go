// Command cocoonbox-agent is the agent resident in every box: `cocoonbox-agent serve` answers the
// control plane's gRPC calls (agent steps, exec, info) behind the per-box credential, and takes
// the model links its steps' model calls go over.
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
	"strconv"
	"syscall"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/tools/browser"
	"github.com/loomhand/cocoonbox/agentvm/tools/desktop"
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

// The box's desktop, as the desktop image starts it (image/desktop/desktop.sh).
const (
	display    = ":0"
	browserBin = "/usr/bin/chromium"
)

// desktopInputAllowed is the desktop tools' own gate. The control lease is enforced one level up:
// the control plane marks a step desktop_input_refused while a person holds the lease, and the
// step loop answers the model's desktop actions with a refusal without calling these tools.
func desktopInputAllowed() error { return nil }

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7070", "address to listen on")
	linkListen := fs.String("link-listen", "127.0.0.1:"+strconv.Itoa(agentvm.LinkPort), "address to accept model links from the control plane on (the box has no network of its own)")
	credFile := fs.String("credential-file", "", "file holding the per-box credential, read when calls arrive (default: $"+agentvm.CredentialEnv+")")
	journalDir := fs.String("journal", agentvm.DefaultJournalDir, "directory of the step journal")
	workDir := fs.String("dir", "", "working directory of the tools (default: the agent's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	cfg := agentvm.Config{CredentialFile: *credFile, Logger: log}
	if *credFile == "" {
		// The file may not exist yet (the control plane writes it after boot); the environment
		// must hold the credential now.
		cred, err := agentvm.LoadCredential("")
		if err != nil {
			return err
		}
		cfg.Credential = cred
	}
	journal, err := agentvm.OpenJournal(*journalDir)
	if err != nil {
		return err
	}
	cfg.Journal = journal
	br := browser.New(browser.Config{Bin: browserBin, Display: display})
	defer func() { _ = br.Close() }()
	desk := desktop.New(desktop.Config{Display: display, Allowed: desktopInputAllowed})
	toolset := append([]tools.Tool{tools.Shell{Dir: *workDir}}, tools.Files(*workDir)...)
	toolset = append(toolset, br.Tools()...)
	cfg.Loop = &agentvm.Loop{Tools: append(toolset, desk.Tools()...), Links: agentvm.NewLinks()}
	srv, err := agentvm.NewServer(cfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	linkLis, err := net.Listen("tcp", *linkListen)
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("listen for links: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		log.Info("stopping")
		srv.Stop()
	}()
	go func() {
		if err := srv.ServeLinks(linkLis); err != nil {
			log.Error("serve links", "err", err)
			stop()
		}
	}()
	log.Info("serving", "addr", lis.Addr().String(), "links", linkLis.Addr().String(), "version", agentvm.Version, "journal", *journalDir)
	return srv.Serve(lis)
}
