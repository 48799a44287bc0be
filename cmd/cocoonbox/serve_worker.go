package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/worker"
	"github.com/loomhand/cocoonbox/workflows"
)

func serveWorkerCommand() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "run the Temporal worker for the box and snapshot workflows and their activities",
		Description: "Needs Temporal (TEMPORAL_ADDRESS), PostgreSQL (COCOONBOX_DATABASE_URL), a sandbox\n" +
			"engine (COCOONBOX_SANDBOXD_URL, COCOONBOX_SANDBOXD_TOKEN) and the snapshot bucket\n" +
			"(COCOONBOX_S3_ENDPOINT, _BUCKET, _REGION, _ACCESS_KEY, _SECRET_KEY, _PATH_STYLE; an empty\n" +
			"endpoint is AWS S3). Prefer the environment to --sandbox-token: a flag shows in the\n" +
			"process list. Starts while PostgreSQL or Temporal is down and waits for them, reporting\n" +
			"\"starting\" at /healthz meanwhile.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "home", Usage: "data dir (default ~/.local/share/cocoonbox)"},
			&cli.StringFlag{Name: "temporal-address", Usage: "Temporal frontend host:port (default " + config.DefaultTemporalListen + ")"},
			&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL URL"},
			&cli.StringFlag{Name: "sandbox-url", Usage: "sandbox engine URL, e.g. http://127.0.0.1:7777"},
			&cli.StringFlag{Name: "sandbox-token", Usage: "sandbox engine root token"},
			&cli.StringFlag{Name: "keyring", Usage: "master key file (default <home>/keys/master.key)"},
			&cli.StringFlag{Name: "template", Usage: "image boxes are claimed from (default " + config.DefaultBoxTemplate + ")"},
			&cli.StringFlag{Name: "s3-endpoint", Usage: "S3 endpoint URL for snapshots (default AWS S3)"},
			&cli.StringFlag{Name: "s3-bucket", Usage: "snapshot bucket (default " + config.DefaultBucket + ")"},
			&cli.StringFlag{Name: "health-listen", Usage: "host:port of /healthz and /metrics, served without a token, or off (default " + config.DefaultWorkerHealthListen + ")"},
			&cli.IntFlag{Name: "snapshot-upload-mibps", Usage: "cap each snapshot upload at this many MiB/s (0: no cap)"},
			&cli.StringFlag{Name: "node", Usage: "ID of the engine node this worker runs beside: register it and keep its record current (cocoonbox admin nodes)"},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error"},
		},
		Action: runServeWorker,
	}
}

func runServeWorker(c *cli.Context) error {
	cfg, err := config.Load(c.String("config"), config.Env(), config.DefaultWorker(config.Env()))
	if err != nil {
		return err
	}
	logger, err := loadRole(c, role{
		strings: map[string]*string{
			"home": &cfg.Home, "temporal-address": &cfg.Temporal.Address, "database-url": &cfg.Postgres.URL,
			"sandbox-url": &cfg.Sandbox.URL, "sandbox-token": &cfg.Sandbox.Token, "keyring": &cfg.Keyring,
			"template": &cfg.Template, "log-level": &cfg.LogLevel, "s3-endpoint": &cfg.S3.Endpoint,
			"s3-bucket": &cfg.S3.Bucket, "health-listen": &cfg.HealthListen, "node": &cfg.Node,
		},
		ints:  map[string]*int{"snapshot-upload-mibps": &cfg.SnapshotUploadMiBps},
		paths: []*string{&cfg.Home, &cfg.Keyring}, level: &cfg.LogLevel, check: cfg.Validate,
	})
	if err != nil {
		return err
	}

	w, err := worker.Start(c.Context, cfg, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "cocoonbox worker: polling task queue %s on %s (engine %s, template %s)\n",
		workflows.TaskQueue, cfg.Temporal.Address, cfg.Sandbox.URL, cfg.Template)
	if addr := w.HealthAddr(); addr != "" {
		fmt.Fprintf(c.App.Writer, "cocoonbox worker: health at http://%s/healthz, metrics at /metrics\n", addr)
	}
	<-c.Context.Done() // main's context ends on SIGINT or SIGTERM
	w.Stop()
	return nil
}
