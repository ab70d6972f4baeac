"""bench/peers.py: the summary per engine, the goals, the Markdown table and the plot."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from _peers_run import ENGINES


def median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None



def _summarize(runs: list[dict[str, Any]], recs: list[dict[str, Any]]) -> dict[str, Any]:
    def per_event(r: dict[str, Any]) -> float | None:
        return r["state_bytes"] / r["events"] if r.get("events") else None

    out: dict[str, Any] = {
        "events_per_s": median([r.get("events_per_s") for r in runs]),
        "events_per_s_all": [r.get("events_per_s") for r in runs],
        "capped": any(r.get("capped") for r in runs),
        "events_measured": median([r.get("events") for r in runs]),
        "state_bytes": median([r.get("state_bytes") for r in runs]),
        "topic_bytes": median([r.get("topic_bytes") for r in runs]),
        "local_state_bytes": median([r.get("local_state_bytes") for r in runs]),
        "state_records": median([r.get("state_records") for r in runs]),
        "state_bytes_per_event": median([per_event(r) for r in runs]),
        "bytes_method": next((r["bytes_method"] for r in runs if "bytes_method" in r), None),
    }
    if recs:
        out["recovery_s"] = median([r.get("recovery_s") for r in recs])
        out["recovery_s_all"] = [r.get("recovery_s") for r in recs]
        out["replayed_records"] = [r.get("replayed_records") for r in recs]
        checks = [r["crosscheck"] for r in recs if r.get("crosscheck")]
        out["crosscheck_equal"] = bool(checks) and all(c["equal"] for c in checks)
        out["crosscheck"] = checks[0] if checks else None
        out["exactly_once_outputs"] = [r.get("exactly_once_outputs") for r in recs]
        if any("duplicate_results" in r for r in recs):
            out["duplicate_results"] = [r.get("duplicate_results") for r in recs]
        errors = [r["error"] for r in recs if "error" in r]
        if errors:
            out["errors"] = errors
    return out


def goals(summary: dict[str, Any]) -> dict[str, Any]:
    g: dict[str, Any] = {}
    for keys, res in summary["results"].items():
        sr = res.get("streamremat", {})
        for peer, want in (("quix", 3.0), ("faust", 10.0)):
            if peer in res and sr.get("events_per_s") and res[peer].get("events_per_s"):
                ratio = sr["events_per_s"] / res[peer]["events_per_s"]
                g[f"throughput_vs_{peer}_{keys}"] = {"ratio": ratio, "goal": want,
                                                     "met": ratio >= want}
                if peer == "quix":  # issue 15's goal after the fast path, at 1k and 100k keys
                    g[f"issue15_throughput_vs_quix_{keys}"] = {"ratio": ratio, "goal": 10.0,
                                                               "met": ratio >= 10.0}
            if peer in res and sr.get("state_bytes_per_event") and res[peer].get(
                    "state_bytes_per_event"):
                ratio = res[peer]["state_bytes_per_event"] / sr["state_bytes_per_event"]
                g[f"bytes_vs_{peer}_{keys}"] = {"ratio": ratio, "goal": 20.0 if keys == "1000"
                                                else None, "met": ratio >= 20.0}
        inside = res.get("faust-streamremat", {})
        if "faust" in res:
            g.update(_inside_faust(keys, inside, res["faust"]))
        peers_rec = [res[p]["recovery_s"] for p in ("quix", "faust")
                     if p in res and res[p].get("recovery_s")]
        if peers_rec and sr.get("recovery_s"):
            ratio = sr["recovery_s"] / min(peers_rec)
            g[f"recovery_vs_fastest_peer_{keys}"] = {"ratio": ratio, "goal": 2.0,
                                                     "met": ratio <= 2.0}
    return g


def _inside_faust(keys: str, inside: dict[str, Any], table: dict[str, Any]
                  ) -> dict[str, Any]:
    """Issue 13's goals: the streamremat operator inside faust against faust's own
    windowed table, >= 10x the events/s and >= 100x fewer durability bytes."""
    g: dict[str, Any] = {}
    if inside.get("events_per_s") and table.get("events_per_s"):
        ratio = inside["events_per_s"] / table["events_per_s"]
        g[f"faust_streamremat_throughput_vs_faust_{keys}"] = {
            "ratio": ratio, "goal": 10.0, "met": ratio >= 10.0}
    if inside.get("state_bytes_per_event") and table.get("state_bytes_per_event"):
        ratio = table["state_bytes_per_event"] / inside["state_bytes_per_event"]
        g[f"faust_streamremat_bytes_vs_faust_{keys}"] = {
            "ratio": ratio, "goal": 100.0, "met": ratio >= 100.0}
    return g


def _fmt(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


# -- report --------------------------------------------------------------------


def table(summary: dict[str, Any]) -> str:
    lines = ["| keys | engine | events/s (median) | state bytes | bytes/event | "
             "state records | recovery s | results = reference |",
             "|---:|---|---:|---:|---:|---:|---:|---|"]
    for keys, res in summary["results"].items():
        for e in ENGINES:
            r = res.get(e)
            if r is None:
                why = summary["skipped"].get(e)
                if why:
                    lines.append(f"| {keys} | {e} | {why} | | | | | |")
                continue
            rate = _fmt(r["events_per_s"]) + (" (capped)" if r["capped"] else "")
            lines.append(
                f"| {keys} | {e} | {rate} | {_fmt(r['state_bytes'])} | "
                f"{_fmt(r['state_bytes_per_event'], 1)} | {_fmt(r['state_records'])} | "
                f"{_fmt(r.get('recovery_s'), 2)} | "
                f"{'-' if e == 'raw' else ('yes' if r.get('crosscheck_equal') else 'NO')} |")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(summary["results"])
    engines = [e for e in ENGINES if any(e in summary["results"][k] for k in keys)]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    metrics = (("events_per_s", "throughput (events/s)"),
               ("state_bytes_per_event", "state-durability bytes per event"),
               ("recovery_s", "recovery after kill -9 (s)"))
    width = 0.8 / max(1, len(engines))
    for ax, (metric, title) in zip(axes, metrics, strict=True):
        for i, e in enumerate(engines):
            vals = [summary["results"][k].get(e, {}).get(metric) or 0 for k in keys]
            ax.bar([j + i * width for j in range(len(keys))], vals, width, label=e)
        ax.set_xticks([j + width * (len(engines) - 1) / 2 for j in range(len(keys))])
        ax.set_xticklabels([f"{int(k):,} keys" for k in keys])
        ax.set_title(title)
        if metric == "state_bytes_per_event":
            ax.set_yscale("symlog")
    axes[0].legend()
    fig.suptitle(f"{summary['events']:,} events, 4 partitions, tumbling 60 s count+sum; "
                 f"median of {summary['reps']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
