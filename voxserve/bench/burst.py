"""`bench speech --burst N`: what a server does with N requests that arrive at once.

A burst is a level whose N requests are all sent at the same instant (N clients, one
request each), its requests dealt over the run's models in turn (`--model tts-1,tts-1-hd`
sends every other request to each). Around each burst the bench reads the server's
`/metrics` (plain HTTP, as any scraper would) and reports what the steps held:
- the engine's units per step by stage (`voxserve_tts_step_units`);
- on the simulated device, the items per call of each model's stage as the device counts
  them (`voxserve_sim_device_items_total` over `..._calls_total`): the one figure that
  tells one model's decoder steps from another's in a mixed burst;
- how often admission held a newcomer, by reason, and the capacity it read.

With the requests' own records it says how many were refused (and the `Retry-After`
they were given), and, per model, continuity and first audio. Nothing here knows the
engine: a server without these metrics gets the requests' figures alone.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp

__all__ = ["burst_lines", "scrape", "step_figures"]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_STAGE = re.compile(r'stage="([^"]+)"')
_REASON = re.compile(r'reason="([^"]+)"')


async def scrape(session: aiohttp.ClientSession, base_url: str) -> dict[str, float]:
    """Every sample of the server's `/metrics` by name and labels; empty when it has none."""
    try:
        async with session.get(base_url.rstrip("/") + "/metrics") as resp:
            if resp.status != 200:
                return {}
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            try:
                out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
            except ValueError:
                continue
    return out


def step_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """What the server's steps held between two scrapes: mean units per engine step by
    stage, mean items per device call by the sim device's stages, admission's holds by
    reason, and the capacity gauge at the end (None where the server has no such metric)."""

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    def stages(prefix: str) -> list[str]:
        return sorted({m.group(1) for k in after if k.startswith(prefix) and (m := _STAGE.search(k))})

    engine: dict[str, float] = {}
    for stage in stages("voxserve_tts_step_units_count"):
        steps = delta(f'voxserve_tts_step_units_count{{stage="{stage}"}}')
        if steps > 0:
            engine[stage] = delta(f'voxserve_tts_step_units_sum{{stage="{stage}"}}') / steps
    device: dict[str, float] = {}
    for stage in stages("voxserve_sim_device_calls_total"):
        calls = delta(f'voxserve_sim_device_calls_total{{stage="{stage}"}}')
        if calls > 0:
            device[stage] = delta(f'voxserve_sim_device_items_total{{stage="{stage}"}}') / calls
    held = {
        m.group(1): delta(key)
        for key in after
        if key.startswith("voxserve_tts_admission_held_total") and (m := _REASON.search(key))
    }
    capacity = after.get("voxserve_tts_capacity_streams")
    return {
        "engine_units_per_step": engine,
        "device_items_per_call": device,
        "admission_held": held,
        "capacity_streams": None if capacity is None or capacity < 0 else capacity,
    }


def burst_lines(level: dict[str, Any]) -> list[str]:
    """The terminal lines of a level measured with its steps (`bench speech --burst`): per
    model, refusals, continuity and first audio; then what the steps held. None for a
    level measured without them."""
    summary = level["summary"]
    steps = summary.get("steps")
    if steps is None:
        return []
    n = level["concurrency"]
    models = summary.get("targets") or {"all": summary}
    lines = []
    for model, s in models.items():
        refused = s["failures_by_status"].get("429", 0)
        retry = s.get("retry_after_s") or []
        ttfp = s["ttfp_s"]
        lines.append(
            f"burst {n} {model}: {s['requests']} sent, {refused} refused"
            + (f" (Retry-After {', '.join(f'{v:g}' for v in retry)} s)" if retry else "")
            + f", {s['failed'] - refused} failed otherwise, continuity {100 * s['continuity_ok_rate']:.1f} %,"
            f" first audio p50 {1e3 * ttfp.get('p50', float('nan')):.0f} ms,"
            f" p99 {1e3 * ttfp.get('p99', float('nan')):.0f} ms"
        )
    cells = [f"{stage} {units:.1f}" for stage, units in steps["engine_units_per_step"].items()]
    cells += [f"{stage} {items:.1f}" for stage, items in steps["device_items_per_call"].items()]
    if cells:
        lines.append(f"burst {n} units per step: {', '.join(cells)}")
    held = {k: v for k, v in steps["admission_held"].items() if v}
    cap = steps["capacity_streams"]
    lines.append(
        f"burst {n} admission held: {', '.join(f'{k} {v:.0f}' for k, v in held.items()) or 'none'}"
        + (f"; capacity {cap:.0f} streams after it" if cap is not None else "")
    )
    return lines
