# Checks a logged real run (shim.c) against the physical-memory rule of the cuda-async model:
# is the pool's ReservedMemCurrent the peak number of 32 MiB chunks overlapped by live
# allocations, counting as still live the frees less than LAG ms old (the GPU not yet there)?
# Usage: python chunks_from_log.py RUN.log.xz  (prints one line per LAG)
import lzma, sys, collections, heapq
C=32<<20
ev=[]
for line in lzma.open(sys.argv[1],'rt'):
    f=line.split()
    if f[0]=='a': ev.append(('a',int(f[1]),int(f[2]),int(f[3]),int(f[4]),int(f[5])))
    else: ev.append(('f',int(f[1]),0,int(f[2]),int(f[3]),int(f[4])))
for lag_ms in [0,0.1,0.3,1,2,5,10,20,50,100]:
    lag=lag_ms*1e6
    live={}; cnt=collections.Counter(); pend=[]; peak=0; hw=0; mism=0; over=0; under=0
    def rel(p,sz):
        for c in range(p//C,(p+sz-1)//C+1): cnt[c]-=1
    for (k,p,s,st,res,t) in ev:
        while pend and pend[0][0]<=t:
            _,pp,sz=heapq.heappop(pend); rel(pp,sz)
        if k=='a':
            sz=(s+511)//512*512; live[p]=sz
            for c in range(p//C,(p+sz-1)//C+1): cnt[c]+=1
            n=sum(1 for v in cnt.values() if v>0); peak=max(peak,n); hw=max(hw,res)
            if peak*C!=hw:
                mism+=1
                if peak*C>hw: over+=1
                else: under+=1
        else:
            sz=live.pop(p); heapq.heappush(pend,(t+lag,p,sz))
    print(f'lag {lag_ms}ms peak {peak} real {hw//C} mismatch {mism} (model over {over} under {under})')
