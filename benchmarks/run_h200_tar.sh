#!/usr/bin/env bash
# run_h200.sh into a scratch folder, then everything as one tarball in OUT_DIR: a device call
# brings back only a few files (a bench suite alone writes four or more), so results went
# missing when steps wrote into $OUT directly. Prints each summary's automatic-route lines.
# Usage (repository root, on the GPU machine): bash benchmarks/run_h200_tar.sh "$OUT" STEP ...
# Here: tar xzf FILES_AT/results.tgz -C benchmarks/results/nvidia-h200/DATE/at-COMMIT
set -u
out=${1:?usage: run_h200_tar.sh OUT_DIR [STEP ...]}
shift
work=$(mktemp -d)
git rev-parse --short HEAD >"$work/git_head.txt" 2>/dev/null  # stale on the device: see commit.txt
bash "$(dirname "$0")/run_h200.sh" "$work" "$@"
tar czf "$out/results.tgz" -C "$work" .
grep -H "automatic route" "$work"/*/summary.md 2>/dev/null
