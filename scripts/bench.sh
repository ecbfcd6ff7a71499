#!/usr/bin/env bash
# Benchmarks: what handnode adds, beside floors measured in the same run (issue 5).
#
#   scripts/bench.sh [--quick] [--no-static] [--only SECTION,...] [--placement same|cross|free]
#
# Builds the release binary (and a static one for its size), starts Xvfb 1280x800 when
# it is installed and no DISPLAY is set (the bench paints a desktop-like ~1 MB picture on
# it so screenshots are not of a blank screen), then runs benches/bench.rs against the binary: a
# real daemon process, a stub pod on loopback inside the bench, grants attached through
# the admin API. Prints one JSON object per line and a summary table with each target and
# pass/fail. Not part of CI: timings on a shared box are noisy, so every time figure is a
# ratio to a floor taken in the same run. Needs no network beyond crates.io for the build.
# --quick runs a tenth of each count (a smoke run); --only runs some sections (memory,
# latency = ping,sys_info,bash,pipelined,hol; approval, attach, redial, screenshot, audit, jobs,
# own_display = own_display_start_ms beside Xvfb + window manager + bus started by hand,
# live_view = live_view_first_frame_ms, live_view_update_ms (xsetroot on the display to the
# viewer's update) and live_view_idle_kib_per_min (--quick: 6 s scaled), needs Xvnc,
# owed = owed_reply_peak_kib, issue 23's memory flood beside --write-buffer-bytes,
# containment = grant_kill_ms beside killing 50 processes by pid; halt = halt_ms_p99 of 16
# grants x 50 processes beside killing 800 by pid; files = file_get and file_put (chunks
# of the grant's data.maxLength, each request within the pod's 1 MiB) beside the echo;
# a11y = desktop_snapshot_ms of a zenity list of ~200 shown elements beside a plain
# pipelined walk of the same elements, needs zenity at-spi2-core dbus-daemon), floors always.
# --placement pins processes to CPUs (needs taskset, util-linux) so that a floor and the
# daemon figure it is compared with cross the same CPU boundaries: on a VM a loopback round
# trip takes ~7 us when both ends share a vCPU and ~60 us when the wake-up crosses to
# another, and without pinning the scheduler picks one or the other per process, sticky
# for seconds (docs/performance.md). `same` (default): the bench, the echo server and the
# daemon on one CPU. `cross`: the bench on one CPU, the servers on another (the issue's
# ~85 us echo floor). `free`: no pinning.
set -euo pipefail

die() { echo "bench: error: $*" >&2; exit 1; }
note() { echo "bench: $*" >&2; }

usage="usage: scripts/bench.sh [--quick] [--no-static] [--only SECTION,...] [--placement same|cross|free]"
placement=same
pass=()
static=1
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) pass+=(--quick); shift ;;
        --only) [ $# -ge 2 ] || die "--only needs sections ($usage)"; pass+=(--only "$2"); shift 2 ;;
        --no-static) static=0; shift ;;
        --placement)
            [ $# -ge 2 ] || die "--placement needs same, cross or free ($usage)"
            placement="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' ($usage)" ;;
    esac
done

cd "$(dirname "$0")/.."
command -v cargo >/dev/null || die "cargo not found; install Rust from https://rustup.rs"

note "building the release binary ..."
cargo build --release --bin handnode >&2 || die "cargo build --release failed (output above)"
bin=$PWD/target/release/handnode

static_args=()
if [ "$static" = 1 ]; then
    triple=x86_64-unknown-linux-gnu
    if [ -x scripts/build-static.sh ]; then
        note "building the static binary with scripts/build-static.sh ..."
        scripts/build-static.sh --libc gnu >&2 || die "scripts/build-static.sh failed"
    else
        note "building the static binary (+crt-static, $triple) ..."
        RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
            cargo build --release --target "$triple" --bin handnode >&2 \
            || die "static build failed (output above); try --no-static"
    fi
    static_args=(--static-bin "$PWD/target/$triple/release/handnode"
                 --static-libc "glibc $(ldd --version | sed -n '1s/.* //p') (+crt-static)")
fi

xvfb_pid=
cleanup() { if [ -n "$xvfb_pid" ]; then kill "$xvfb_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
if [ -z "${DISPLAY:-}" ] && command -v Xvfb >/dev/null; then
    for n in $(seq 90 99); do
        [ -e "/tmp/.X11-unix/X$n" ] || [ -e "/tmp/.X$n-lock" ] && continue
        Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
        xvfb_pid=$!
        for _ in $(seq 100); do
            [ -e "/tmp/.X11-unix/X$n" ] && break
            kill -0 "$xvfb_pid" 2>/dev/null || break
            sleep 0.05
        done
        if [ -e "/tmp/.X11-unix/X$n" ]; then
            # Our own Xvfb: the bench may paint a desktop-like picture on it.
            export DISPLAY=":$n" BENCH_PAINT_ROOT=1
            break
        fi
        kill "$xvfb_pid" 2>/dev/null || true
        xvfb_pid=
    done
    if [ -n "${DISPLAY:-}" ]; then
        note "Xvfb 1280x800 on $DISPLAY"
    else
        note "Xvfb did not start; screenshot figures will be notes"
    fi
elif [ -z "${DISPLAY:-}" ]; then
    note "no Xvfb (apt-get install xvfb scrot) and no DISPLAY: screenshot figures will be notes"
fi

# The CPUs this script may use, e.g. "0-1,4" -> "0 1 4".
cpus=$(awk '/^Cpus_allowed_list:/ { n = split($2, r, ","); for (i = 1; i <= n; i++) {
    m = split(r[i], ab, "-"); for (c = ab[1]; c <= (m > 1 ? ab[2] : ab[1]); c++) printf "%d ", c } }' /proc/self/status)
read -r -a cpu_list <<<"$cpus"
pin=()
case "$placement" in
    same|cross)
        command -v taskset >/dev/null || die "--placement $placement needs taskset (apt-get install util-linux), or use --placement free"
        pin=(taskset -c "${cpu_list[0]}")
        if [ "$placement" = cross ]; then
            [ "${#cpu_list[@]}" -ge 2 ] || die "--placement cross needs two CPUs; this box allows: $cpus"
            pass+=(--server-cpu "${cpu_list[1]}")
        fi ;;
    free) ;;
    *) die "unknown placement '$placement' ($usage)" ;;
esac
pass+=(--placement "$placement")

note "building the benchmark ..."
cargo bench --bench bench --no-run >&2 || die "cargo bench --no-run failed (output above)"
note "running the benchmark (placement $placement) ..."
"${pin[@]}" cargo bench --bench bench -- --bin "$bin" "${static_args[@]}" "${pass[@]}"
