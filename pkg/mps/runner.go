// Package mps runs one CUDA MPS control daemon per GPU: it starts or adopts
// the daemon, applies the default limits and reads them back before a device
// is offered to anyone.
//
// Runner is the only exec boundary of the project: ExecRunner runs the real
// nvidia-cuda-mps-control, the simulated control of pkg/mps/mpssim answers
// like it from a state file, and the contract test (contract_test.go) runs
// the same assertions on both. What
// the real control prints is recorded in docs/gpu-runs/mps-probe*.txt; the
// parsers here are tested against those texts.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Env is the environment one control daemon lives in. Each GPU gets its own
// pipe directory, so the same binary talks to a different daemon per Env.
type Env struct {
	PipeDir string // CUDA_MPS_PIPE_DIRECTORY
	LogDir  string // CUDA_MPS_LOG_DIRECTORY
	// VisibleDevices is CUDA_VISIBLE_DEVICES: one GPU UUID in the per-GPU
	// layout; in the single layout every GPU's, comma-separated, in the
	// order that makes the daemon's device ordinal i the i-th (VisibleList).
	VisibleDevices string
	// Single marks the single layout's daemon even when it serves one GPU.
	Single bool
	// MultiUser starts the daemon with -multiuser-server: one MPS server
	// for clients of every UID, instead of one per UID, which makes a second
	// UID wait until every client of the first has exited (mps-facts.md).
	MultiUser bool
	// PrivilegedDir is the daemon's private directory (0700, this
	// daemon's), outside the pipe root: the Guard moves the control
	// daemon's control_privileged there and sends every command through
	// it (privileged.go). Empty: the socket stays in PipeDir.
	PrivilegedDir string
}

// startArgs are the control binary's arguments to daemonize for env.
func startArgs(env Env) []string {
	if env.MultiUser {
		return []string{"-d", "-multiuser-server"}
	}
	return []string{"-d"}
}

// Output is what one control client invocation printed.
type Output struct {
	Stdout, Stderr string
	ExitCode       int
}

// Runner runs the control binary. Run sends ONE command line on stdin (the
// control client answers only the first line, mps-probe2.txt); a non-zero
// exit is reported in Output.ExitCode with a nil error, errors are kept for
// failures to run at all and for ctx expiry. Start runs `-d`.
type Runner interface {
	Run(ctx context.Context, env Env, command string) (Output, error)
	Start(ctx context.Context, env Env) error
}

// ExecRunner runs the real nvidia-cuda-mps-control.
type ExecRunner struct {
	binary string
	// waitDelay bounds how long Run waits for the child's output pipes once
	// the child has exited or was killed: a wedged client, or a grandchild
	// that inherited the pipes, must not hang the caller.
	waitDelay time.Duration
}

// NewExecRunner returns a Runner for the control binary at binary (a path or
// a name looked up in PATH).
func NewExecRunner(binary string) Runner {
	return &ExecRunner{binary: binary, waitDelay: time.Second}
}

// Run implements Runner.
func (r *ExecRunner) Run(ctx context.Context, env Env, command string) (Output, error) {
	if err := CheckCommand(command); err != nil {
		return Output{}, err
	}
	cmd := exec.CommandContext(ctx, r.binary)
	cmd.Env = childEnv(os.Environ(), env)
	cmd.Stdin = strings.NewReader(command + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = r.waitDelay

	start := time.Now()
	err := cmd.Run()
	out := Output{Stdout: stdout.String(), Stderr: stderr.String()}
	if cmd.ProcessState != nil {
		out.ExitCode = cmd.ProcessState.ExitCode()
	}
	if ctxErr := ctx.Err(); ctxErr != nil && err != nil {
		return out, fmt.Errorf("mps control %q %s after %s: %w", command, expiredVerb(ctxErr),
			time.Since(start).Round(time.Millisecond), ctxErr)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		// A non-zero exit is an answer (no daemon, for one), not a failure to run.
	case errors.Is(err, exec.ErrWaitDelay) && out.ExitCode == 0:
		// The client answered and exited; only an inheritor of its pipes
		// lingered, and WaitDelay cut it loose.
	case cmd.ProcessState == nil:
		return out, fmt.Errorf("running %s (config key mps_control_binary): %w", r.binary, err)
	default:
		return out, fmt.Errorf("mps control %q: %w", command, err)
	}
	return out, nil
}

// Start implements Runner: `<binary> -d`, which forks the daemon and returns.
// The daemon must outlive us: it runs in its own session (stopping our
// service never signals it) and its stdout/stderr go to /dev/null, never to
// pipes of ours, which a daemon holding open would keep Wait from returning.
func (r *ExecRunner) Start(ctx context.Context, env Env) error {
	cmd := exec.CommandContext(ctx, r.binary, startArgs(env)...)
	cmd.Env = childEnv(os.Environ(), env)
	// nil Stdin/Stdout/Stderr: os/exec connects them to the null device.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.WaitDelay = r.waitDelay
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the MPS control daemon: running %s (config key mps_control_binary): %w", r.binary, err)
	}
	err := cmd.Wait()
	if ctxErr := ctx.Err(); ctxErr != nil && err != nil {
		return fmt.Errorf("starting the MPS control daemon: %s %s %s after %s: %w", r.binary, strings.Join(startArgs(env), " "), expiredVerb(ctxErr),
			time.Since(start).Round(time.Millisecond), ctxErr)
	}
	if err != nil {
		return fmt.Errorf("starting the MPS control daemon: %s %s: %w (see %s/control.log)", r.binary, strings.Join(startArgs(env), " "), err, env.LogDir)
	}
	return nil
}

func expiredVerb(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return "was canceled"
}

// CheckCommand refuses command lines the control client would not run as
// one command: it reads one line per invocation.
func CheckCommand(command string) error {
	if strings.ContainsAny(command, "\r\n") {
		return fmt.Errorf("mps control command %q: one command line per call, without newlines", command)
	}
	return nil
}

// childEnv is the parent's environment without any CUDA_MPS_* or
// CUDA_VISIBLE_DEVICES (a stray one would point the child at another daemon
// or GPU), plus those of env. Empty Env fields are left unset: an empty
// CUDA_VISIBLE_DEVICES would hide every GPU.
func childEnv(parent []string, env Env) []string {
	out := make([]string, 0, len(parent)+3)
	for _, kv := range parent {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CUDA_MPS_") || k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		out = append(out, kv)
	}
	for _, kv := range [][2]string{
		{"CUDA_MPS_PIPE_DIRECTORY", env.PipeDir},
		{"CUDA_MPS_LOG_DIRECTORY", env.LogDir},
		{"CUDA_VISIBLE_DEVICES", env.VisibleDevices},
	} {
		if kv[1] != "" {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	return out
}
