// ojas-train-bench: a training run driven from Go, step by step, as a Go
// service runs it (OpenTrainer, TrainStep until max_steps, SaveCheckpoint),
// for scripts/go_vs_cli.sh to time against `ojas train` on the same config.
// The trainer writes metrics.jsonl as the CLI's does; the script reads both.
//
//	ojas-train-bench -config c.json -out RUN [-set key=value ...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strings"

	"ojas"
)

type sets []string

func (s *sets) String() string     { return strings.Join(*s, ",") }
func (s *sets) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	config := flag.String("config", "", "training config (JSON, as `ojas train --config`)")
	out := flag.String("out", "", "run directory (replaced)")
	var overrides sets
	flag.Var(&overrides, "set", "key=value override, as `ojas train --set` (repeatable)")
	flag.Parse()
	log.SetFlags(0)
	if *config == "" || *out == "" {
		log.Fatal("ojas-train-bench: -config and -out are required")
	}
	if flag.NArg() > 0 { // the flag package stops at the first of these: -set after it is lost
		log.Fatalf("ojas-train-bench: unexpected argument %q (overrides go as -set key=value, "+
			"before any other argument)", flag.Arg(0))
	}
	cfg, err := ojas.LoadRunConfig(*config)
	if err == nil {
		err = cfg.Set(overrides...)
	}
	if err != nil {
		log.Fatalf("ojas-train-bench: %v", err)
	}
	ctx := context.Background()
	tr, err := ojas.OpenTrainer(ctx, cfg, ojas.TrainOptions{OutDir: *out, Overwrite: true})
	if err != nil {
		log.Fatalf("ojas-train-bench: %v", err)
	}
	defer tr.Close()
	var last ojas.StepResult
	for {
		r, err := tr.TrainStep(ctx)
		if err != nil {
			if errors.Is(err, ojas.ErrState) && last.Step > 0 { // max_steps done
				break
			}
			log.Fatalf("ojas-train-bench: step: %v", err)
		}
		last = r
	}
	ckpt, err := tr.SaveCheckpoint()
	if err != nil {
		log.Fatalf("ojas-train-bench: checkpoint: %v", err)
	}
	fmt.Printf("{\"steps\": %d, \"loss\": %.6f, \"checkpoint\": %q}\n", last.Step, last.Loss, ckpt)
}
