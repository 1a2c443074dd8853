import json, sys, os
for path in sys.argv[1:]:
    d = json.load(open(path)); out = []
    for lv in d["levels"]:
        s = lv["summary"]; c = lv["concurrency"]
        recs = sorted(lv["records"], key=lambda r: r["sent_at_s"])
        burst = max(r["ttfp_s"] or 0 for r in recs[:c]); rest = max([r["ttfp_s"] or 0 for r in recs[c:]] or [0])
        out.append("c=%d p50 %.0f p99 %.0f (burst max %.0f, after %.0f) cont %.3f thr %.2f" % (c, s["ttfp_s"]["p50"]*1e3, s["ttfp_s"]["p99"]*1e3, burst*1e3, rest*1e3, s["continuity_ok_rate"], s["audio_throughput"]))
    held = path[:-5] + ".held"
    print(os.path.basename(path)[:-5].ljust(10), " | ".join(out), "| held", open(held).read() if os.path.exists(held) else "")
