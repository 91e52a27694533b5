import subprocess, statistics, json
M=2**20*32
runs={}
for l in open('../asyncheld/async.jsonl'):
    d=json.loads(l); runs.setdefault(d['workload'],[]).append(d['reserved_peak'])
rep={"mistral_generate":1308622848,"qwen2_generate":1476395008,"mobilenet_train":4596957184,"swin_train":7381975040}
pick=[("Now","Some(Newest)","newest"),("Runs","Some(Newest)","bestnew"),("Runs","Some(First)","best"),("Now","Some(Newest)","oldest")]
res={}
for w in rep:
    out=subprocess.run(["../asim/target/release/asim",f"{w}.req","-"],capture_output=True,text=True).stdout
    for l in out.splitlines():
        c,ex,p,peak,m=l.split("\t")
        if (c,ex,p) in pick: res.setdefault((c,ex,p),{})[w]=int(peak)*M
for k in pick:
    e={w:100*(res[k][w]-statistics.median(runs[w]))/statistics.median(runs[w]) for w in rep}
    er={w:100*(res[k][w]-rep[w])/rep[w] for w in rep}
    print("/".join(k), "holdout vs median:", {w:round(v,2) for w,v in e.items()}, "mean", round(sum(map(abs,e.values()))/4,2), "vs replay", {w:round(v,2) for w,v in er.items()})
