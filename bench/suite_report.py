#!/usr/bin/env python3
"""bench/suite_report.py: the report side of scripts/bench-suite.

Reads the raw outputs the bench programs left in DIR/raw (JSON per run of
bench_counter, bench_collatz and bench_sinks; JSON lines of bench_abs and
bench_channel) and turns them into figures: each with its runs, median,
min, max and spread ((max - min) / median). Standard library only.

  suite_report.py machine DIR            DIR/raw/machine.json: OS, kernel, CPU
                                         model, cores, compiler, commit, load
                                         average now (no hostname)
  suite_report.py show DIR SECTION       prints SECTION's table so far
  suite_report.py saturated FILE         the median rate without checkpoints
                                         at the default buffer timeout of
                                         bench_abs JSON lines (the curve's 100%)
  suite_report.py final DIR [--md FILE]  DIR/results.json, DIR/*.csv,
                                         DIR/RESULTS.md, and PNG plots when
                                         gnuplot is on the PATH; with --md,
                                         also FILE, its plots in a folder
                                         beside it named after it
                                         (bench/RESULTS.md: bench/results/),
                                         keeping the sections of the FILE
                                         there that the suite does not make
                                         (hand-written notes)

The Nexmark part is scripts/bench-nexmark's own table (DIR/raw/nexmark.md,
its runs in DIR/raw/nexmark.json), shown as it is under "## Nexmark".
"""
import csv
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

SECTIONS = ["ceiling", "throughput", "abs", "scaling", "skew", "latency", "curve", "state", "cycles", "windows", "sinks"]


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return ""


def machine(d):
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    if not cpu:
        cpu = sh(["sysctl", "-n", "machdep.cpu.brand_string"]) or platform.processor()
    cc = os.environ.get("CC", "cc")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = sh(["git", "-C", root, "rev-parse", "--short", "HEAD"]) or "unknown"
    if sh(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"]):
        commit += " (with uncommitted changes)"
    m = {
        "os": platform.system() + " " + (platform.mac_ver()[0] or sh(["sh", "-c", ". /etc/os-release 2>/dev/null && echo $PRETTY_NAME"])),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "compiler": sh([cc, "--version"]).splitlines()[0] if sh([cc, "--version"]) else cc,
        "commit": commit,
        "load_average_start": list(os.getloadavg()),
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    os.makedirs(os.path.join(d, "raw"), exist_ok=True)
    json.dump(m, open(os.path.join(d, "raw", "machine.json"), "w"), indent=1)
    print("machine: %s, %s cores, %s, %s, kernel %s, commit %s, load average %.2f"
          % (m["cpu"], m["cores"], m["os"], m["compiler"], m["kernel"], m["commit"], m["load_average_start"][0]))


def jl(path):
    out = []
    for p in sorted(glob.glob(path)):
        for line in open(p):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def jfiles(pattern):
    out = []
    for p in sorted(glob.glob(pattern)):
        try:
            out.append((os.path.basename(p), json.load(open(p))))
        except (ValueError, OSError):
            pass
    return out


def kname(k):
    k = int(k)
    for div, s in ((1000000000, "G"), (1000000, "M"), (1000, "K")):
        if k >= div and k % div == 0:
            return "%d%s" % (k // div, s)
    return str(k)


class Figures:
    def __init__(self):
        self.f = {}
        self.order = []

    def add(self, section, fid, label, unit, value, **params):
        if value is None:
            return
        if fid not in self.f:
            self.f[fid] = {"id": fid, "section": section, "label": label, "unit": unit,
                           "params": params, "runs": []}
            self.order.append(fid)
        self.f[fid]["runs"].append(value)

    def na(self, section, fid, label, unit, **params):
        if fid not in self.f:
            self.f[fid] = {"id": fid, "section": section, "label": label, "unit": unit,
                           "params": params, "runs": [], "status": "n/a"}
            self.order.append(fid)

    def done(self):
        out = []
        for fid in self.order:
            x = self.f[fid]
            r = x["runs"]
            if r and all(isinstance(v, (int, float)) for v in r):
                med = statistics.median(r)
                x["median"] = med
                x["min"] = min(r)
                x["max"] = max(r)
                x["spread"] = (max(r) - min(r)) / med if med else 0.0
                x.setdefault("status", "ok")
            out.append(x)
        return out


def collect(d):
    raw = os.path.join(d, "raw")
    F = Figures()
    # ceiling: hand loops (from bench_counter) and the channel
    for name, j in jfiles(os.path.join(raw, "counter-*.json")):
        k = j["keys"]
        for r in j["results"]:
            w = r["workers"]
            F.add("ceiling" if k == 1000000 else "throughput", "hand.keys=%s.w=%d" % (kname(k), w),
                  "hand-written loop, %s keys, %d thread%s" % (kname(k), w, "s" * (w > 1)), "rec/s",
                  r["hand_median"], keys=k, workers=w)
            F.add("throughput", "counter.keys=%s.w=%d" % (kname(k), w),
                  "counter job, %s keys, %d worker%s" % (kname(k), w, "s" * (w > 1)), "rec/s",
                  r["weir_median"], keys=k, workers=w)
            F.add("throughput", "counter_vs_hand.keys=%s.w=%d" % (kname(k), w),
                  "counter job / hand loop, %s keys, %d worker%s" % (kname(k), w, "s" * (w > 1)),
                  "ratio", r["ratio_median"], keys=k, workers=w)
    for r in jl(os.path.join(raw, "channel*.jsonl")):
        F.add("ceiling", "channel.batch=%d" % r["batch"],
              "SPSC hand-off between 2 threads, batches of %d" % r["batch"], "rec/s", r["rate"],
              batch=r["batch"])
    # ABS comparison and scaling
    for sec, pat in (("abs", "abs*.jsonl"), ("scaling", "scaling*.jsonl")):
        for r in jl(os.path.join(raw, pat)):
            m, iv, w = r["mode"], r["interval_ms"], r["workers"]
            tag = "%s.%s.%dms.w=%d" % (sec, m, iv, w)
            lab = "%s%s, %d worker%s" % (m, "" if m == "off" else " %d ms" % iv, w, "s" * (w > 1))
            if r["status"] == "n/a":
                F.na(sec, tag + ".rate", lab + ": rec/s", "rec/s", mode=m, interval_ms=iv, workers=w)
                F.na(sec, tag + ".ratio", lab + ": ratio vs off", "ratio", mode=m, interval_ms=iv, workers=w)
                continue
            if r["status"] != "ok":
                continue
            F.add(sec, tag + ".rate", lab + ": rec/s", "rec/s", r["rate"], mode=m, interval_ms=iv, workers=w)
            if m != "off":
                F.add(sec, tag + ".ratio", lab + ": ratio vs off", "ratio", r["ratio"], mode=m,
                      interval_ms=iv, workers=w)
                F.add(sec, tag + ".ckpts", lab + ": checkpoints per run", "count", r["checkpoints"],
                      mode=m, interval_ms=iv, workers=w)
                if r.get("ckpt_ms"):
                    F.add(sec, tag + ".ckpt_ms", lab + ": checkpoint duration", "ms", r["ckpt_ms"],
                          mode=m, interval_ms=iv, workers=w)
                    F.add(sec, tag + ".ckpt_mb", lab + ": checkpoint size", "MB", r["ckpt_bytes"] / 1e6,
                          mode=m, interval_ms=iv, workers=w)
    # alignment under skew: one slow path
    for r in jl(os.path.join(raw, "skew*.jsonl")):
        if r["status"] != "ok" or r["mode"] == "off":
            continue
        sk, iv, w = r.get("skew_us", 0), r["interval_ms"], r["workers"]
        tag = "skew.%dus" % sk
        lab = "aligned %d ms, %s" % (iv, "slow path %d us/batch" % sk if sk else "no skew")
        F.add("skew", tag + ".align_ms", lab + ": alignment time", "ms", r["align_ms"], skew_us=sk)
        F.add("skew", tag + ".ckpt_ms", lab + ": checkpoint duration", "ms", r["ckpt_ms"], skew_us=sk)
        F.add("skew", tag + ".ratio", lab + ": ratio vs off", "ratio", r["ratio"], skew_us=sk)
    # latency: after the first 20% of the run (latency.jsonl), once every
    # key exists (latency-steady.jsonl), and alignment over many
    # checkpoints (latency-align.jsonl)
    for fname, tag, what in (("latency.jsonl", "latency", ""), ("latency-steady.jsonl", "latency_steady", ", every key present"),
                             ("latency-align.jsonl", "latency_align", "")):
        for r in jl(os.path.join(raw, fname)):
            iv = r["interval_ms"]
            c = "off" if not iv else "%d ms checkpoints" % iv
            for p in ("p50", "p99", "p999"):
                F.add("latency", "%s.%s.%dms" % (tag, p, iv), "%s latency, %s, %s rec/s%s" % (p.replace("p999", "p99.9"), c, kname(r["rate"]), what),
                      "us", r[p + "_us"], interval_ms=iv, rate=r["rate"])
            if iv and r.get("align_n") and tag != "latency_steady":
                for p in ("p50", "p99", "max"):
                    F.add("latency", "alignment.%s.%dms" % (p, iv),
                          "%s alignment time, %s, %s rec/s (%d checkpoints)" % (p, c, kname(r["rate"]), r["align_n"]),
                          "us", r["align_%s_us" % p], interval_ms=iv, rate=r["rate"])
            if iv and r.get("align_steady_n") and tag != "latency_steady":
                for p in ("p50", "p99"):
                    F.add("latency", "alignment_steady.%s.%dms" % (p, iv),
                          "%s alignment time once every key exists, %s, %s rec/s (%d checkpoints)"
                          % (p, c, kname(r["rate"]), r["align_steady_n"]),
                          "us", r["align_steady_%s_us" % p], interval_ms=iv, rate=r["rate"])
    # the latency-throughput curve
    sat = saturated(os.path.join(raw, "curve-rate.jsonl"))
    for r in jl(os.path.join(raw, "curve-rate.jsonl")):
        if r.get("status") != "ok":
            continue
        bt, m = r.get("buffer_timeout_us", 1000), r["mode"]
        lab = "no checkpoints" if m == "off" else "%s %d ms" % (m, r["interval_ms"])
        F.add("curve", "curve_rate.bt=%d.%s" % (bt, m), "sustained rate, buffer timeout %d us, %s" % (bt, lab),
              "rec/s", r["rate"], buffer_timeout_us=bt, mode=m)
    for r in jl(os.path.join(raw, "curve.jsonl")):
        if not sat:
            break
        bt, iv = r.get("buffer_timeout_us", 1000), r["interval_ms"]
        pct = int(round(100.0 * r["rate"] / sat))
        c = "off" if not iv else "%d ms checkpoints" % iv
        for p in ("p50", "p99", "p999"):
            F.add("curve", "curve.bt=%d.%dms.%d%%.%s" % (bt, iv, pct, p),
                  "%s, %d%% load (%s rec/s), timeout %d us, %s" % (p.replace("p999", "p99.9"), pct, kname(r["rate"]), bt, c),
                  "us", r[p + "_us"], buffer_timeout_us=bt, interval_ms=iv, pct=pct)
    # state
    for r in jl(os.path.join(raw, "memory*.jsonl")):
        k = kname(r["keys"])
        F.add("state", "memory.keys=%s" % k, "peak RSS per key, %s keys" % k, "bytes", r["bytes_per_key"], keys=r["keys"])
        F.add("state", "final_ckpt_mb.keys=%s" % k, "checkpoint size, %s keys" % k, "MB", r["ckpt_bytes"] / 1e6, keys=r["keys"])
        F.add("state", "final_ckpt_ms.keys=%s" % k, "checkpoint duration (final), %s keys" % k, "ms", r["ckpt_ms"], keys=r["keys"])
    for name, j in jfiles(os.path.join(raw, "restore-*.json")):
        k = kname(j["keys"])
        # total_ms: the restore's wall time (reading and building overlap
        # since streamed restore); older results have read + build.
        total = j.get("total_ms_median", j["read_ms_median"] + j["build_ms_median"])
        F.add("state", "restore_s.keys=%s" % k, "restore time (wall), %s keys" % k, "s",
              total / 1e3, keys=j["keys"])
        F.add("state", "restore_s_per_gb.keys=%s" % k, "restore, s per GB stored, %s keys" % k, "s/GB",
              j["s_per_stored_gb_median"], keys=j["keys"])
        F.add("state", "restore_mb.keys=%s" % k, "restored checkpoint size, %s keys" % k, "MB",
              j["stored_mb_median"], keys=j["keys"])
    # cycles
    for name, j in jfiles(os.path.join(raw, "collatz-*.json")):
        for r in j["results"]:
            c = r["checkpoints"]
            F.add("cycles", "collatz.%s.rate" % c, "collatz loop, %s: numbers/s" % c, "numbers/s", r["numbers_per_s"], config=c)
            F.add("cycles", "collatz.%s.trips" % c, "collatz loop, %s: loop trips/s" % c, "trips/s", r["trips_per_s"], config=c)
            if c != "off":
                F.add("cycles", "collatz.%s.ratio" % c, "collatz loop, %s: ratio vs off" % c, "ratio", r["ratio_vs_off"], config=c)
                F.add("cycles", "collatz.%s.log" % c, "collatz loop, %s: back-edge log per checkpoint" % c, "bytes",
                      r["log_bytes_median"], config=c)
    # windows (bench_windows appends one line per invocation)
    wpath = os.path.join(raw, "windows.jsonl")
    for r in (jl(wpath) if os.path.exists(wpath) else []):
        k = kname(r["keys"])
        for job in ("tumbling", "sliding"):
            F.add("windows", "windows.%s.ratio.keys=%s" % (job, k),
                  "%s window count vs the counter job, %s keys" % (job, k), "ratio",
                  r["%s_ratio" % job], keys=r["keys"])
            F.add("windows", "windows.%s.rate.keys=%s" % (job, k), "%s window count, %s keys" % (job, k),
                  "rec/s", r["%s_mrps" % job] * 1e6, keys=r["keys"])
    # sinks
    for name, j in jfiles(os.path.join(raw, "sinks-*.json")):
        for key, v in j.items():
            if key.endswith("_per_s"):
                s = key[: -len("_per_s")]
                F.add("sinks", "sink.%s" % s, "%s sink, 1 s checkpoints" % s,
                      "rec/s" if s == "null" else "effects/s", v, sink=s)
    return F.done()


def saturated(path):
    """The median rate without checkpoints at the default buffer timeout."""
    rates = [r["rate"] for r in jl(path) if r.get("status") == "ok" and r["mode"] == "off"
             and r.get("buffer_timeout_us", 1000) == 1000]
    return int(statistics.median(rates)) if rates else 0


def fmt(v, unit):
    if v is None:
        return "-"
    if unit in ("rec/s", "effects/s", "numbers/s", "trips/s"):
        return "%.2fM" % (v / 1e6) if v >= 1e5 else "%.0f" % v
    if unit == "ratio":
        return "%.3f" % v
    if unit in ("us", "ms", "bytes", "count"):
        return "%.0f" % v
    return "%.2f" % v


def table(figs, section=None, out=print, md=False):
    rows = [f for f in figs if section is None or f["section"] == section]
    if md:
        out("| figure | unit | median | min | max | spread | runs |")
        out("|---|---|---|---|---|---|---|")
    for f in rows:
        if f.get("status") == "n/a":
            cells = [f["label"], f["unit"], "n/a", "", "", "", "0"]
        else:
            cells = [f["label"], f["unit"], fmt(f["median"], f["unit"]), fmt(f["min"], f["unit"]),
                     fmt(f["max"], f["unit"]), "%.0f%%" % (100 * f["spread"]), str(len(f["runs"]))]
        if md:
            out("| " + " | ".join(cells) + " |")
        else:
            out("  %-62s %-9s %10s %10s %10s %6s %4s" % tuple(cells))


NEXMARK_TITLE = "Nexmark"


def nexmark_section(raw):
    """The lines of the Nexmark section from bench-nexmark's table and runs, or []."""
    md, js = os.path.join(raw, "nexmark.md"), os.path.join(raw, "nexmark.json")
    if not (os.path.exists(md) and os.path.exists(js)):
        return []
    j = json.load(open(js))
    ev = j.get("events", 0)
    evs = "%gM" % (ev / 1e6) if ev >= 1e6 else str(ev)
    load = j.get("load_average", float("nan"))
    lines = ["## " + NEXMARK_TITLE, "",
             "`scripts/bench-nexmark` (run by the suite): the generator alone and each query on %s events%s, "
             "`--sink null` (each query still formats every field of every result), checkpoints off and aligned "
             "every 10 s, median of %d runs, off and on interleaved; per core = events / CPU time of the process "
             "(wait4's rusage); load average %.1f at its start. The last column is per core with checkpoints "
             "over Flink 1.13's published events/s per core (the issue's goal: 30x)."
             % (evs, " (the suite's runs 100M)" if ev < 100000000 else "", j.get("reps", 0), load),
             ""]
    lines += open(md).read().rstrip("\n").split("\n")
    lines.append("")
    return lines


def kept_sections(path, made):
    """The sections ("## title" to the next) of the file at path whose titles
    are not in made: hand-written ones, which a rewrite must not lose."""
    if not os.path.exists(path):
        return []
    out, keep = [], False
    for line in open(path).read().split("\n"):
        if line.startswith("## "):
            keep = line[3:].strip() not in made
        if keep:
            out.append(line)
    while out and out[-1] == "":
        out.pop()
    return out + [""] if out else []


def get(figs, fid):
    for f in figs:
        if f["id"] == fid and "median" in f:
            return f["median"]
    return None


def goals(figs, cores):
    g = []

    def add(name, value, target, ok, note=""):
        g.append({"goal": name, "value": value, "target": target,
                  "met": None if value is None else bool(ok), "note": note})

    c1, c2 = get(figs, "counter.keys=1M.w=1"), get(figs, "counter.keys=1M.w=2")
    h1, h2 = get(figs, "counter_vs_hand.keys=1M.w=1"), get(figs, "counter_vs_hand.keys=1M.w=2")
    add("counter 1M keys, 1 worker, rec/s", c1, ">= 20M", c1 is not None and c1 >= 20e6,
        "ratio to goal %.2f; %.2f of the hand loop" % (c1 / 20e6, h1 or 0) if c1 else "")
    add("counter 1M keys, 2 workers, rec/s", c2, ">= 40M", c2 is not None and c2 >= 40e6,
        "ratio to goal %.2f; %.2f of the hand loop" % (c2 / 40e6, h2 or 0) if c2 else "not run (fewer than 2 cores)")
    # The runs without checkpoints of the same invocation say how far apart
    # two identical runs land; a loss goal tighter than that is not resolved.
    noise = None
    for f in figs:
        if f["id"] == "abs.off.0ms.w=%d.rate" % cores and "spread" in f:
            noise = f["spread"]
    for iv, lim in ((1000, 0.02), (100, 0.05)):
        fid = "abs.aligned.%dms.w=%d.ratio" % (iv, cores)
        r = get(figs, fid)
        loss = None if r is None else 1 - r
        add("aligned ABS loss at %d ms" % iv, loss, "<= %.0f%%" % (lim * 100), loss is not None and loss <= lim)
        # Prefer the spread of the ratio's own runs (each paired with its
        # neighbours without checkpoints) when there are several.
        # With several runs: met if every run is within the goal, missed if
        # none is, not resolved otherwise. With one run: not resolved when
        # runs without checkpoints spread more than both goal and loss.
        own = [f for f in figs if f["id"] == fid and len(f["runs"]) > 1]
        if own:
            lo, hi = 1 - max(own[0]["runs"]), 1 - min(own[0]["runs"])
            g[-1]["note"] = "runs: %.0f%% .. %.0f%%" % (100 * lo, 100 * hi)
            g[-1]["met"] = True if hi <= lim else False if lo > lim else None
        elif loss is not None and noise is not None and noise > lim and abs(loss) < noise:
            g[-1]["met"] = None
            g[-1]["note"] = "not resolved: runs without checkpoints spread %.0f%%" % (100 * noise)
    a, s = get(figs, "abs.aligned.100ms.w=%d.ratio" % cores), get(figs, "abs.sync.100ms.w=%d.ratio" % cores)
    add("sync baseline visibly worse than aligned at 100 ms (throughput sync/aligned)",
        None if a is None or s is None else s / a, "< 1", a is not None and s is not None and s < a)
    p0, p1 = get(figs, "latency.p99.0ms"), get(figs, "latency.p99.1000ms")
    add("p99 latency with 1 s checkpoints / without", None if not p0 or p1 is None else p1 / p0, "<= 2",
        p0 and p1 is not None and p1 / p0 <= 2)
    for tag, what in (("latency", ""), ("latency_steady", ", every key present")):
        v = get(figs, "%s.p99.0ms" % tag)
        if v is not None:
            add("p99 latency at 200k rec/s, no checkpoints%s, us" % what, v, "<= 1000", v <= 1000)
        v = get(figs, "%s.p999.0ms" % tag)
        if v is not None:
            add("p99.9 latency at 200k rec/s, no checkpoints%s, us" % what, v, "<= 5000", v <= 5000)
        v = get(figs, "%s.p99.1000ms" % tag)
        if v is not None:
            add("p99 latency at 200k rec/s, 1 s checkpoints%s, us" % what, v, "<= 2000", v <= 2000)
    # Alignment without backpressure: the fixed-rate runs, the shortest
    # interval (the most checkpoints).
    for iv in (100, 1000):
        a50, a99 = get(figs, "alignment.p50.%dms" % iv), get(figs, "alignment.p99.%dms" % iv)
        if a50 is not None:
            n = [f for f in figs if f["id"] == "alignment.p99.%dms" % iv][0]["label"]
            n = re.search(r"\((\d+) checkpoints\)", n)
            note = "%s checkpoints a run" % n.group(1) if n else ""
            add("alignment p50 without backpressure (%d ms checkpoints), us" % iv, a50, "<= 500", a50 <= 500, note)
            add("alignment p99 without backpressure (%d ms checkpoints), us" % iv, a99, "<= 2000", a99 <= 2000, note)
            s99 = get(figs, "alignment_steady.p99.%dms" % iv)
            if s99 is not None:
                add("  the same once every key exists (no state growth), us", s99, "<= 2000", s99 <= 2000)
            break
    for job, lim in (("tumbling", 0.5), ("sliding", 0.25)):
        v = get(figs, "windows.%s.ratio.keys=1M" % job)
        if v is not None:
            add("%s window count (1M keys) / counter job" % job, v, ">= %.2f" % lim, v >= lim)
    for k in ("10M", "1M"):
        s = get(figs, "restore_s_per_gb.keys=%s" % k)
        if s is not None:
            add("restore, s per GB stored (%s keys)" % k, s, "<= 1", s <= 1,
                "a 9 MB checkpoint: fixed costs dominate" if k == "1M" else "")
            break
    return g


def gnuplot(d, figs, cores):
    if not shutil.which("gnuplot"):
        return []
    made = []

    def plot(name, script, data):
        dat = os.path.join(d, name + ".dat")
        with open(dat, "w") as f:
            f.write(data)
        png = os.path.join(d, name + ".png")
        s = "set terminal pngcairo size 800,500\nset output '%s'\nset grid\n%s\n" % (png, script.replace("DAT", dat))
        r = subprocess.run(["gnuplot"], input=s, text=True, capture_output=True)
        if r.returncode == 0:
            made.append(os.path.basename(png))
        os.unlink(dat)

    ivs = sorted({f["params"]["interval_ms"] for f in figs if f["section"] == "abs" and f["params"].get("mode") != "off"})
    if ivs:
        lines = []
        for iv in ivs:
            row = ["%g" % (iv / 1000)]
            for m in ("aligned", "unaligned", "sync"):
                r = get(figs, "abs.%s.%dms.w=%d.ratio" % (m, iv, cores))
                row.append("NaN" if r is None else "%.2f" % (100 * (1 - r)))
            lines.append(" ".join(row))
        plot("abs_overhead", "set title 'Overhead vs snapshot interval (6 operators, 3 shuffles, %d workers)'\n"
             "set xlabel 'snapshot interval (s)'\nset ylabel 'throughput loss vs no checkpoints (%%)'\nset logscale x\n"
             "plot 'DAT' u 1:2 w lp t 'aligned ABS', '' u 1:3 w lp t 'unaligned', '' u 1:4 w lp t 'synchronous'" % cores,
             "\n".join(lines) + "\n")
    ws = sorted({f["params"]["workers"] for f in figs if f["section"] == "scaling"})
    if ws:
        lines = []
        for w in ws:
            off, al = get(figs, "scaling.off.0ms.w=%d.rate" % w), get(figs, "scaling.aligned.3000ms.w=%d.rate" % w)
            lines.append("%d %s %s" % (w, "NaN" if off is None else off / 1e6, "NaN" if al is None else al / 1e6))
        plot("scaling", "set title 'Scaling with workers, 3 s snapshot interval'\nset xlabel 'workers'\n"
             "set ylabel 'M records/s'\nset xtics 1\nplot 'DAT' u 1:2 w lp t 'no checkpoints', '' u 1:3 w lp t 'aligned ABS 3 s'",
             "\n".join(lines) + "\n")
    bts = sorted({f["params"]["buffer_timeout_us"] for f in figs if f["id"].startswith("curve.")})
    pcts = sorted({f["params"]["pct"] for f in figs if f["id"].startswith("curve.")})
    if bts and pcts:
        lines = []
        for pct in pcts:
            row = [str(pct)]
            for bt in bts:
                for iv in (0, 1000):
                    v = get(figs, "curve.bt=%d.%dms.%d%%.p99" % (bt, iv, pct))
                    row.append("NaN" if v is None else "%g" % (v / 1000))
            lines.append(" ".join(row))
        cols, k = [], 2
        for bt in bts:
            for iv in (0, 1000):
                cols.append("'' u 1:%d w lp t 'timeout %d us%s'" % (k, bt, ", 1 s checkpoints" if iv else ""))
                k += 1
        cols[0] = cols[0].replace("''", "'DAT'", 1)
        plot("latency_curve", "set title 'p99 latency against load (%d workers)'\nset xlabel 'load (%% of the saturated rate)'\n"
             "set ylabel 'p99 latency (ms)'\nset logscale y\nplot " % cores + ", ".join(cols), "\n".join(lines) + "\n")
    ks = sorted({f["params"]["keys"] for f in figs if f["id"].startswith("counter.keys")})
    ws = sorted({f["params"]["workers"] for f in figs if f["id"].startswith("counter.keys")})
    if ks:
        lines = []
        for w in ws:
            lines.append(" ".join([str(w)] + ["%s" % ((get(figs, "counter.keys=%s.w=%d" % (kname(k), w)) or float("nan")) / 1e6) for k in ks]))
        pl = ", ".join("'DAT' u 1:%d w lp t '%s keys'" % (i + 2, kname(k)) for i, k in enumerate(ks))
        plot("throughput", "set title 'Counter job throughput'\nset xlabel 'workers'\nset ylabel 'M records/s'\nset xtics 1\nplot " + pl,
             "\n".join(lines).replace("nan", "NaN") + "\n")
    return made


def final(d, md_extra):
    raw = os.path.join(d, "raw")
    m = json.load(open(os.path.join(raw, "machine.json")))
    suite = json.load(open(os.path.join(raw, "suite.json"))) if os.path.exists(os.path.join(raw, "suite.json")) else {}
    figs = collect(d)
    cores = suite.get("workers") or m["cores"]
    g = goals(figs, cores)
    notes = []
    for p in sorted(glob.glob(os.path.join(raw, "note-*.txt"))):
        notes.append(open(p).read().strip())
    load = m["load_average_start"][0]
    res = {"machine": m, "suite": suite, "figures": figs, "goals": g, "notes": notes,
           "noisy": load > 1}
    json.dump(res, open(os.path.join(d, "results.json"), "w"), indent=1)
    for sec in SECTIONS:
        rows = [f for f in figs if f["section"] == sec]
        if not rows:
            continue
        with open(os.path.join(d, sec + ".csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "label", "unit", "median", "min", "max", "spread", "runs"])
            for x in rows:
                w.writerow([x["id"], x["label"], x["unit"], x.get("median", "n/a"), x.get("min", ""),
                            x.get("max", ""), x.get("spread", ""), " ".join("%g" % v for v in x["runs"])])
    plots = gnuplot(d, figs, cores)
    res["plots"] = plots
    json.dump(res, open(os.path.join(d, "results.json"), "w"), indent=1)
    lines = []
    o = lines.append
    o("# weir benchmark results")
    o("")
    o("Generated by `scripts/bench-suite%s` (bench/suite_report.py) from `results.json`; "
      "compare your machine with `scripts/bench-suite --quick --out DIR`." % (" --quick" if suite.get("quick") else ""))
    o("")
    o("## Machine")
    o("")
    o("| | |")
    o("|---|---|")
    for k in ("os", "kernel", "arch", "cpu", "cores", "compiler", "commit", "date_utc"):
        o("| %s | %s |" % (k, m.get(k, "")))
    o("| load average at start | %s |" % " ".join("%.2f" % x for x in m["load_average_start"]))
    o("| suite | %s, %s repetitions, %s s |" % ("quick" if suite.get("quick") else "full", suite.get("reps", "?"),
                                                suite.get("duration_s", "?")))
    o("")
    if load > 1:
        o("**This machine was shared and noisy during the run** (load average %.1f at the start, on %s cores: "
          "other work was running). Absolute rates mean little; read the ratios, each measured against a neighbour "
          "in the same invocation, and the spread column." % (load, m["cores"]))
        o("")
    o("Every figure is the median over its runs; spread = (max - min) / median. What each workload "
      "does, and what limits the goals that are missed, is in [README.md](README.md).")
    o("")
    o("## Goals")
    o("")
    o("| goal | measured | target | met |")
    o("|---|---|---|---|")
    for x in g:
        v = x["value"]
        if v is None:
            vs = "-"
        elif "loss" in x["goal"]:
            vs = "%.1f%%" % (100 * v)
        else:
            vs = "%.2fM" % (v / 1e6) if abs(v) >= 1e5 else "%.3f" % v
        o("| %s | %s | %s | %s |" % (x["goal"], vs + (" (%s)" % x["note"] if x["note"] else ""), x["target"],
                                     ("?" if v is not None else "-") if x["met"] is None else ("yes" if x["met"] else "**no**")))
    o("")
    titles = {"ceiling": "Ceiling", "throughput": "Throughput (counter job, checkpoints off)",
              "abs": "The ABS paper's job: 6 operators, 3 hash shuffles (Figure 7)",
              "scaling": "Scaling with workers at a 3 s interval (Figure 8)",
              "skew": "Alignment under skew (one slow path before a shuffle)",
              "latency": "End-to-end record latency",
              "curve": "Latency against load and buffer timeout (100k keys)",
              "state": "State", "cycles": "Cycles (collatz loop)",
              "windows": "Event-time windows (10 records per key and window, 100 ms disorder)",
              "sinks": "Sinks"}
    for sec in SECTIONS:
        if not any(f["section"] == sec for f in figs):
            continue
        o("## " + titles[sec])
        o("")
        table(figs, sec, o, md=True)
        o("")
    lines.extend(nexmark_section(raw))
    # Sections of the published file that the suite does not make: kept,
    # after the suite's own (the title of any section it may make, made this
    # time or not, is the suite's).
    made = set(titles.values()) | {"Machine", "Goals", "Plots", "Notes", NEXMARK_TITLE}
    kept = kept_sections(md_extra, made) if md_extra else []
    at_kept = len(lines)
    if plots:
        o("## Plots")
        o("")
        for p in plots:
            o("![%s](@PLOTS@%s)" % (p[:-4].replace("_", " "), p))
            o("")
    if notes:
        o("## Notes")
        o("")
        for n in notes:
            o("- " + n)
        o("")
    text = "\n".join(lines)
    open(os.path.join(d, "RESULTS.md"), "w").write(text.replace("@PLOTS@", ""))
    text = "\n".join(lines[:at_kept] + kept + lines[at_kept:])
    if md_extra:
        # The plots go beside it, in results/ (named after the file).
        base = os.path.splitext(os.path.basename(md_extra))[0].lower()
        sub = os.path.join(os.path.dirname(os.path.abspath(md_extra)), base)
        if plots:
            os.makedirs(sub, exist_ok=True)
            for p in plots:
                shutil.copy(os.path.join(d, p), os.path.join(sub, p))
        open(md_extra, "w").write(text.replace("@PLOTS@", base + "/"))
    print("== summary")
    table(figs)
    print("== goals")
    for x in g:
        print("  %-62s %-14s %-8s %s %s" % (x["goal"], "-" if x["value"] is None else "%.4g" % x["value"], x["target"],
                                           "-" if x["met"] is None else ("met" if x["met"] else "MISSED"), x["note"]))
    print("wrote %s/results.json, CSVs, RESULTS.md%s" % (d, ", " + ", ".join(plots) if plots else
                                                     " (no plots: %s)" % ("nothing to plot" if shutil.which("gnuplot") else "gnuplot not installed")))


def main(a):
    if len(a) >= 2 and a[0] == "machine":
        machine(a[1])
    elif len(a) >= 2 and a[0] == "saturated":
        print(saturated(a[1]))
    elif len(a) >= 3 and a[0] == "show" and a[2] == "nexmark":
        p = os.path.join(a[1], "raw", "nexmark.md")
        print(open(p).read().rstrip("\n") if os.path.exists(p) else "(no Nexmark runs)")
    elif len(a) >= 3 and a[0] == "show":
        table(collect(a[1]), a[2])
    elif len(a) >= 2 and a[0] == "final":
        md = a[a.index("--md") + 1] if "--md" in a else None
        final(a[1], md)
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
