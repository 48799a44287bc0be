// Command cocoonbox-agent is the agent resident in every box: `cocoonbox-agent serve` answers the
// control plane's gRPC calls (agent steps, exec, desktop, state, info) behind the per-box
// credential, takes the model links its steps' model calls go over, and serves the agent's tools
// over MCP on the box's loopback for whatever runs in the box.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/tools/browser"
	"github.com/loomhand/cocoonbox/agentvm/tools/desktop"
	"github.com/loomhand/cocoonbox/agentvm/wire"
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

// maxManagedWait bounds how long chromium's launch waits for the desktop's window manager:
// XFCE's announces itself seconds after boot (~14 s on a loaded 2-core host under gVisor).
const maxManagedWait = 30 * time.Second

// waitManaged waits, at most maxManagedWait, for a window manager to manage the desktop, so that
// the window about to open is visible to people watching from its first frame. A desktop without
// one still gets its window, later visible or not: the agent's work does not depend on it.
func waitManaged(ctx context.Context, desk *desktop.Desktop, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, maxManagedWait)
	defer cancel()
	start := time.Now()
	if wm, err := desk.WaitManaged(ctx); err != nil {
		log.Warn("no window manager on the desktop; opening the window anyway", "err", err)
	} else if waited := time.Since(start); waited > time.Second {
		log.Info("waited for the window manager", "wm", wm, "took", waited)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:"+strconv.Itoa(wire.AgentPort), "address to listen on")
	linkListen := fs.String("link-listen", "127.0.0.1:"+strconv.Itoa(wire.LinkPort), "address to accept model links from the control plane on (the box has no network of its own)")
	credFile := fs.String("credential-file", "", "file holding the per-box credential, read when calls arrive (default: $"+wire.CredentialEnv+")")
	journalDir := fs.String("journal", agentvm.DefaultJournalDir, "directory of the step journal")
	workDir := fs.String("dir", "", "working directory of the tools (default: the agent's)")
	mcpListen := fs.String("mcp-listen", "127.0.0.1:"+strconv.Itoa(wire.MCPPort), "loopback address of the in-box MCP endpoint (/mcp, no credential); empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if *mcpListen != "" {
		if err := loopback(*mcpListen); err != nil {
			return fmt.Errorf("serve: --mcp-listen: %w", err)
		}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	cfg := agentvm.Config{CredentialFile: *credFile, Logger: log, MCP: *mcpListen != ""}
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
	desk := desktop.New(desktop.Config{Display: display})
	br := browser.New(browser.Config{Bin: browserBin, Display: display, BeforeLaunch: func(ctx context.Context) {
		waitManaged(ctx, desk, log)
	}})
	defer func() { _ = br.Close() }()
	toolset := append([]tools.Tool{tools.Shell{Dir: *workDir}}, tools.Files(*workDir)...)
	toolset = append(toolset, br.Tools()...)
	toolset = append(toolset, desk.Tools()...)
	cfg.Loop = &agentvm.Loop{Tools: toolset, Links: agentvm.NewLinks()}
	cfg.Desktop = desk
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

	var mcpLis net.Listener
	if *mcpListen != "" {
		if mcpLis, err = net.Listen("tcp", *mcpListen); err != nil {
			_ = lis.Close()
			_ = linkLis.Close()
			return fmt.Errorf("listen for mcp: %w", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	mcpSrv := &http.Server{Handler: agentvm.MCPHandler(cfg.Loop.GateDesktop(toolset), log), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		log.Info("stopping")
		_ = mcpSrv.Close()
		srv.Stop()
	}()
	if mcpLis != nil {
		go func() {
			if err := mcpSrv.Serve(mcpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("serve mcp", "err", err)
				stop()
			}
		}()
	}
	go func() {
		if err := srv.ServeLinks(linkLis); err != nil {
			log.Error("serve links", "err", err)
			stop()
		}
	}()
	log.Info("serving", "addr", lis.Addr().String(), "links", linkLis.Addr().String(), "mcp", *mcpListen, "version", agentvm.Version, "journal", *journalDir)
	return srv.Serve(lis)
}

// loopback checks that addr listens on the box's loopback only: the MCP endpoint takes no
// credential (see agentvm.MCPHandler), so it must never be reachable from outside the box.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	return nil
}
