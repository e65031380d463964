#!/usr/bin/env bash
# The night in miniature on one GPU (kinds nvidia-h100-x1, nvidia-h200), run with the device tool (carry `.whl`, as
# lab/device/ladder.sh says): one session from the shipped fp32 eager model of dit-xl2-256 at the lane's shipped
# settings (25 sampling steps, its own rounds), warm fork servers on, judging in order the whole of
# examples/gpu-ladder/ (01-08) with six no-ops spread through the chain from the hand-graphed best on (where a
# no-op costs seconds, not minutes), two real slowdowns and one quality failure; `dit-ar calibrate` on the best
# after 04 (the machine's offset bound for the rest), one re-validation at the end (REVALIDATE=end: none inside
# the experiments), then the profile of the final best. It is lab/device/ladder.sh with this plan (PLAN, STEPS,
# ROUNDS, WARM, CALIBRATE_*, REVALIDATE and PROFILE_AFTER may be overridden): call it again on the same warm
# machine to resume where the deadline stopped it.
#   SESSION_S=560 FRESH=1 bash lab/device/night.sh      # call 1
#   SESSION_S=560 bash lab/device/night.sh              # call 2 (resumes), as many as it takes
# lab/device/ladder_summary.py (in $OUT/summary.txt) gives the night's figures: judged experiments per hour, the
# no-ops' outcomes and centring, the slowest KEEP and no-op, the first timed pair's bias, and the kept chain.
here="$(cd "$(dirname "$0")" && pwd)"
export PLAN="${PLAN:-01 02 03 04 noop1 05 noop2 slow1 06 noop3 qfail 07 noop4 slow2 08 noop5 noop6}"
export STEPS="${STEPS:-25}" ROUNDS="${ROUNDS:-lane}" WARM="${WARM-1}" PROFILE_AFTER="${PROFILE_AFTER-end}"
export CALIBRATE_AFTER="${CALIBRATE_AFTER-04}" CALIBRATE_PAIRS="${CALIBRATE_PAIRS:-4}" CALIBRATE_S="${CALIBRATE_S:-200}"
export REVALIDATE="${REVALIDATE-end}"
export SCRATCH="${SCRATCH:-/tmp/night}"
exec bash "$here/ladder.sh"
