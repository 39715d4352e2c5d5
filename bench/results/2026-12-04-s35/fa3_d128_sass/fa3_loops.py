# Loops of an sm90 SASS listing: python3 fa3_loops.py FILE FIRST_LINE LAST_LINE HGMMAS prints each backward
# branch whose body holds HGMMAS HGMMA instructions, with its length and instruction mix per warp and pass.
import re,sys,collections
lines=open(sys.argv[1]).read().splitlines()
start=int(sys.argv[2]); end=int(sys.argv[3]); nh=int(sys.argv[4])
L=[l for l in lines[start:end] if re.match(r'\s+/\*[0-9a-f]{4,6}\*/',l)]
addr=[];ops=[]
for l in L:
    m=re.match(r'\s+/\*([0-9a-f]+)\*/\s+([^;]*);',l)
    addr.append(int(m.group(1),16)); ops.append(m.group(2).strip())
idx={a:i for i,a in enumerate(addr)}
def op(o):
    w=o.split(); w=w[1] if w[0].startswith('@') else w[0]; return w.split('.')[0]
for i,o in enumerate(ops):
    m=re.search(r'\bBRA (?:!?U?P\d, )?(0x[0-9a-f]+)',o)
    if m:
        t=int(m.group(1),16)
        if t in idx and t<addr[i]:
            body=range(idx[t],i+1)
            h=sum('HGMMA' in ops[j] for j in body)
            if h==nh:
                c=collections.Counter(op(ops[j]) for j in body)
                u=sum(v for k,v in c.items() if k.startswith('U') or k in('R2UR','S2UR'))
                print(f"loop {hex(t)}..{hex(addr[i])} len {len(body)} HGMMA {h} uniform {u} R2UR {c['R2UR']} BRA {c['BRA']} BAR {c['BAR']} MUFU {c['MUFU']} FMNMX {c['FMNMX']} ISETP {c['ISETP']} FSEL {c['FSEL']}")
