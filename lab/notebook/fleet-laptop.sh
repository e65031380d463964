#!/usr/bin/env bash
# the laptop transcript of lab/notebook/fleet-laptop.md: every command echoed with a $ prompt, its output after it
# (Ray's INFO log lines left out). Paths are this VM's: the venv and the checkout it clones; run it from /tmp/laptop.
set -u
. /work/wt/ray/.venv/bin/activate
step() { echo "\$ $1"; local t=$(date +%s); bash -c "$1" 2>&1 | grep -v -E "^20[0-9-]+ [0-9:,]+\s+(INFO|VINFO|SUCC)|^\s*$"; echo "[exit ${PIPESTATUS[0]}, $(( $(date +%s) - t )) s]"; echo; }
cd /tmp/laptop && rm -rf proj proj-lap-* lap-0*.out && git clone -q /work/wt/ray proj && cd proj
git config user.email you@example.invalid; git config user.name you
echo "# $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname): $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GB, load $(cut -d' ' -f1 /proc/loadavg); $(git log -1 --format='checkout of %h')"
echo
step "ray start --head --num-cpus=2 --num-gpus=0 --include-dashboard=false --disable-usage-stats"
step "dit-ar fleet doctor"
step "dit-ar fleet up --lane embedded-cpu --sessions 2 --tag-prefix lap"
step "cd ../proj-lap-00 && git apply pytest_dit_ar/cli/demo_patches/01-exact-batch-cfg.patch && git commit -qam 'batch the two guidance passes'"
step "cd ../proj-lap-01 && git apply pytest_dit_ar/cli/demo_patches/03-approximate-half-steps.patch && git commit -qam 'half the steps'"
step "(cd ../proj-lap-00 && dit-ar experiment --classification exact --description 'batch the two guidance passes' > ../lap-00.out 2>&1; echo lap-00 exit \$?) & (cd ../proj-lap-01 && dit-ar experiment --classification approximate --description 'half the sampling steps' > ../lap-01.out 2>&1; echo lap-01 exit \$?) & wait"
step "grep -E '^(run |class:|quality:|speed:|judged in its slot|VERDICT)' ../lap-00.out"
step "grep -E '^(run |class:|quality:|speed:|judged in its slot|VERDICT)' ../lap-01.out"
step "dit-ar fleet status --idea 'batched guidance'"
step "cd ../proj-lap-01 && dit-ar fleet adopt --from lap-00 | grep -E '^(run |class:|speed:|judged in its slot|VERDICT)'"
step "cd ../proj-lap-01 && dit-ar status | sed -n '1,3p;7,20p'"
step "cd ../proj-lap-00 && dit-ar calibrate --pairs 3 --budget-s 900 | tail -4"
step "cd ../proj-lap-00 && dit-ar revalidate | tail -3"
step "dit-ar fleet status"
step "dit-ar fleet down"
step "ray stop"
