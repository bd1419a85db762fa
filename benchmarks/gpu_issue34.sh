#!/usr/bin/env bash
# The old name of gpu_throughput_tf32_compile.sh (issue 34's notes and RESULTS cite it): the same run, same arguments.
exec bash "$(dirname "$0")/gpu_throughput_tf32_compile.sh" "$@"
