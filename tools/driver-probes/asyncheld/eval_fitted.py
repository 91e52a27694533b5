import subprocess, collections, sys
M=2**20*32
med = {"gpt2_train":16642998272,"resnet50_train":8875147264,"two_streams":2684354560,"llama_generate":1174405120,"bert_finetune":4060086272,"vit_train":9395240960,"t5_generate":536870912,"gpt2_generate":603979776,"convnext_train":7113539584,
"opt_generate":1073741824,"gptneox_generate":738197504,"efficientnet_train":11542724608,"t5_train":4362076160}
rep = {"gpt2_train":16441671680,"resnet50_train":8858370048,"two_streams":2583691264,"llama_generate":1308622848,"bert_finetune":4060086272,"vit_train":9596567552,"t5_generate":570425344,"gpt2_generate":603979776,"convnext_train":7012876288,
"opt_generate":1275068416,"gptneox_generate":738197504,"efficientnet_train":11542724608,"t5_train":4328521728}
res = collections.defaultdict(dict)
for w in med:
    realf = f"../asyncreplay/{w}_async.txt" if w in ("opt_generate","gptneox_generate","efficientnet_train","t5_train") else "-"
    out = subprocess.run(["../asim/target/release/asim", f"{w}.req", realf], capture_output=True, text=True).stdout
    for l in out.splitlines():
        c, ex, p, peak, m = l.split("\t"); res[(c,ex,p)][w] = (int(peak)*M, m)
rows=[]
for k, d in res.items():
    errs = {w: 100*(d[w][0]-med[w])/med[w] for w in med}
    errr = {w: 100*(d[w][0]-rep[w])/rep[w] for w in med}
    mean = sum(abs(e) for e in errs.values())/len(errs); worst = max(abs(e) for e in errs.values())
    meanr = sum(abs(e) for e in errr.values())/len(errr)
    rows.append((mean, worst, meanr, k, errs, d))
rows.sort()
for mean, worst, meanr, k, errs, d in rows[:12]:
    print(f"{'/'.join(k):32s} mean {mean:5.2f} worst {worst:5.2f} vs-replay mean {meanr:5.2f} | " + " ".join(f"{e:+.1f}" for e in errs.values()), " addr:", [d[w][1] for w in ("opt_generate","t5_train")])
