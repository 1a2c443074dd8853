import json, sys, collections
tr = json.load(open(sys.argv[1]))
S = [e for e in tr if e[0]=="S"]
units = [e for e in tr if e[0] in "AV"]

import os
first = int(os.environ.get("FIRST", "7"))
burst = list(range(first, first+16))
t0 = [e for e in S if e[2]==first][0][7]
fp = {}
for e in units:
    if e[0]=="V" and e[3]==0: fp[e[2]] = e[8]
T = max(fp[s] for s in burst)
print("T (last burst first packet) %.3f s after first submit; submits spread %.3f s" % (T-t0, S[15][7]-t0))
cat = collections.Counter(); cnt = collections.Counter()
for e in units:
    a, b = max(e[7], t0), min(e[8], T)
    if b <= a: continue
    k = e[0]
    if e[0]=="A": k = "A seg0" if e[4]==0 else "A seg>=1"
    else: k = "V seq%d" % min(e[3],3) + (" (%d fr)" % e[5] if e[3]<3 else "")
    if e[2] not in burst: k += " [non-burst]"
    cat[k] += (b-a)*e[6]; cnt[k]+=1
tot = sum(cat.values())
for k,v in sorted(cat.items()): print("%-28s %6.0f ms core  n=%d" % (k, v*1e3, cnt[k]))
print("busy %.0f ms of %.0f ms (2 workers) -> idle %.0f ms" % (tot*1e3, 2*(T-t0)*1e3, (2*(T-t0)-tot)*1e3))
# per-stream timeline
for s in burst:
    sub = [e for e in S if e[2]==s][0][7]-t0
    a = [e for e in units if e[2]==s and e[0]=="A" and e[4]==0][0]
    print("stream %3d submit %.3f  A %.3f-%.3f (%.0f ms, %d ids)  first %.3f" % (s, sub, a[7]-t0, a[8]-t0, (a[8]-a[7])*1e3, [e for e in S if e[2]==s][0][5], fp[s]-t0))
