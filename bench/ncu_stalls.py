"""Summarize an Nsight Compute source page (SASS, CSV): warp-stall samples by reason over the
whole kernel, then the instructions with the most samples and their two main reasons.

  ncu -i report.ncu-rep --page source --print-source sass --csv > src.csv
  python3 bench/ncu_stalls.py src.csv [TOP]
"""
import csv,sys,collections
f=sys.argv[1]
rows=list(csv.reader(open(f)))
hdr=rows[1]; data=rows[2:]
ix={h:i for i,h in enumerate(hdr)}
stall=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
tot=collections.Counter()
S=ix['Warp Stall Sampling (All Samples)']
allsamp=0
for r in data:
    if len(r)<len(hdr): continue
    try: allsamp+=int(r[S])
    except: pass
    for h in stall:
        try: tot[h]+=int(r[ix[h]])
        except: pass
print("total samples",allsamp)
for h,v in tot.most_common(12): print(f"  {h:28s} {v:9d} {100*v/allsamp:5.1f}%")
top=sorted([r for r in data if len(r)>=len(hdr) and r[S].isdigit()], key=lambda r:-int(r[S]))[:int(sys.argv[2]) if len(sys.argv)>2 else 30]
for r in top:
    reasons=sorted(((int(r[ix[h]]) if r[ix[h]].isdigit() else 0,h) for h in stall),reverse=True)[:2]
    print(f"{r[S]:>7s} {r[ix['Address']][-5:]} {r[ix['Source']].strip()[:60]:60s} {reasons}")
