// A service-style use of the ojas Go module: train a GPT for N steps,
// checkpoint halfway, close and resume from the checkpoint as a restarted
// service would, checkpoint at the end, then load the trained model and
// stream a sample. SIGINT or SIGTERM stop training between steps and
// checkpoint before exiting.
//
//	go run . -config c.json -data DIR -tokenizer DIR -out RUN -steps 20 -prompt "And God said"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"ojas"
)

func main() {
	config := flag.String("config", "", "training config (JSON, as `ojas train --config`)")
	data := flag.String("data", "", "directory of train_*.bin / val_*.bin shards (overrides data_dir)")
	tokDir := flag.String("tokenizer", "", "tokenizer directory (for bits per byte and the sample)")
	out := flag.String("out", "run", "run directory (replaced)")
	steps := flag.Int64("steps", 20, "training steps in all")
	prompt := flag.String("prompt", "The", "prompt of the sample")
	device := flag.String("device", "cpu", "cpu, cuda or cuda:N")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*config, *data, *tokDir, *out, *steps, *prompt, *device); err != nil {
		log.Fatalf("ojas-example: %v", err)
	}
}

func run(config, data, tokDir, out string, steps int64, prompt, device string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := ojas.SystemProfile()
	log.Printf("machine: %s, %d cores, %.1f GiB, CUDA %v", p.CPUModel, p.Cores,
		float64(p.MemoryBytes)/(1<<30), p.CUDADevices)

	cfg := ojas.DefaultRunConfig()
	if config != "" {
		var err error
		if cfg, err = ojas.LoadRunConfig(config); err != nil {
			return err
		}
	}
	set := []string{fmt.Sprintf("max_steps=%d", steps), "device=" + device}
	if data != "" {
		set = append(set, "data_dir="+data)
	}
	if tokDir != "" {
		set = append(set, "tokenizer_dir="+tokDir)
	}
	if err := cfg.Set(set...); err != nil {
		return err
	}

	// first life of the service: half the steps, then a checkpoint
	tr, err := ojas.OpenTrainer(ctx, cfg, ojas.TrainOptions{OutDir: out, Overwrite: true})
	if err != nil {
		return err
	}
	ckpt, err := train(ctx, tr, steps/2)
	tr.Close()
	if err != nil {
		return err
	}

	// second life: resume from that checkpoint and finish
	tr, err = ojas.Resume(ctx, ckpt, ojas.TrainOptions{})
	if err != nil {
		return err
	}
	at, _ := tr.Step()
	log.Printf("resumed at step %d from %s", at, ckpt)
	ckpt, err = train(ctx, tr, steps)
	if err == nil {
		if loss, bpb, eerr := tr.Eval(ctx); eerr == nil {
			log.Printf("val loss %.4f, %.4f bits per byte", loss, bpb)
		}
	}
	tr.Close()
	if err != nil {
		return err
	}

	// serve: load the trained model and stream a sample
	m, err := ojas.LoadModel(ctx, ckpt, ojas.LoadOptions{Device: device})
	if err != nil {
		return err
	}
	defer m.Close()
	if tokDir == "" {
		return nil
	}
	tok, err := ojas.LoadTokenizer(tokDir)
	if err != nil {
		return err
	}
	defer tok.Close()
	ids, err := tok.Encode(prompt)
	if err != nil {
		return err
	}
	eot := tok.EOT()
	opts := ojas.SampleOptions{Temperature: 0.8, TopK: 40, Seed: 1, MaxNewTokens: 60}
	if eot >= 0 {
		opts.StopToken = &eot
	}
	fmt.Print(prompt)
	_, err = m.Generate(ctx, ids, opts, func(t int32) bool {
		b, derr := tok.DecodeBytes([]int32{t}) // raw bytes: a character may span tokens
		if derr == nil {
			os.Stdout.Write(b)
		}
		return derr == nil
	})
	fmt.Println()
	return err
}

// train steps tr up to step `until` (or until ctx is done) and checkpoints.
func train(ctx context.Context, tr *ojas.Trainer, until int64) (string, error) {
	for {
		at, err := tr.Step()
		if err != nil || at >= until {
			break
		}
		r, err := tr.TrainStep(ctx)
		if errors.Is(err, context.Canceled) {
			log.Printf("stopping at step %d: checkpointing", at)
			break
		}
		if err != nil {
			return "", err
		}
		log.Printf("step %d: loss %.4f, grad norm %.3f, lr %.2e, %.0f tokens/s", r.Step, r.Loss,
			r.GradNorm, r.LR, r.TokensPerS)
	}
	ckpt, err := tr.SaveCheckpoint()
	if err == nil {
		log.Printf("checkpoint %s", ckpt)
	}
	if ctx.Err() != nil && err == nil {
		err = ctx.Err()
	}
	return ckpt, err
}
