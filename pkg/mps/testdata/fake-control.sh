#!/bin/sh
# A stand-in for nvidia-cuda-mps-control used by runner_test.go: it answers
# fixed texts so the tests exercise the real os/exec path. Background children
# write their PID to $CUDA_MPS_LOG_DIRECTORY so the test can stop them.
if [ "$1" = "-d" ]; then
	# What a daemonizing start sees: its session, where stdout points, its env.
	out=$(readlink /proc/$$/fd/1) err=$(readlink /proc/$$/fd/2)
	{
		echo "pid=$$"
		echo "sid=$(cut -d' ' -f6 /proc/$$/stat)"
		echo "stdout=$out"
		echo "stderr=$err"
		echo "pipe=$CUDA_MPS_PIPE_DIRECTORY"
	} > "$CUDA_MPS_LOG_DIRECTORY/start.txt"
	exit "${FAKE_START_EXIT:-0}"
fi
read -r cmd
case "$cmd" in
env)
	echo "pipe=$CUDA_MPS_PIPE_DIRECTORY"
	echo "log=$CUDA_MPS_LOG_DIRECTORY"
	echo "visible=$CUDA_VISIBLE_DEVICES"
	echo "thread=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset}"
	echo "path=${PATH:+set}"
	;;
x)
	echo 'Unknown command "x"'
	;;
nodaemon)
	echo 'Cannot find MPS control daemon process' >&2
	exit 1
	;;
hang)
	# sleep is a child, not exec'd: killing the shell leaves it holding our
	# stdout, which only WaitDelay gets us out of.
	sleep 600 &
	echo $! > "$CUDA_MPS_LOG_DIRECTORY/child.pid"
	wait
	;;
linger)
	# Answers and exits, but a background child keeps the stdout pipe open.
	sleep 600 &
	echo $! > "$CUDA_MPS_LOG_DIRECTORY/child.pid"
	echo '25.0'
	;;
*)
	echo "got: $cmd"
	;;
esac
