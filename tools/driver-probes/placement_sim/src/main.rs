// Prototype cudaMallocAsync placement variants over .req files; peak chunks and address match.
use std::collections::BTreeMap;
use std::io::Read;
const CH: u64 = 32 << 20;
#[derive(Clone, Copy)]
enum Ev { A(usize, u64, usize), R(usize, bool), C(usize) }
fn load(path: &str) -> (usize, Vec<Ev>) {
    let mut s = String::new();
    if path.ends_with(".xz") {
        let out = std::process::Command::new("xz").args(["-dc", path]).output().unwrap();
        s = String::from_utf8(out.stdout).unwrap();
    } else { std::fs::File::open(path).unwrap().read_to_string(&mut s).unwrap(); }
    let mut it = s.lines();
    let n: usize = it.next().unwrap().split_whitespace().next().unwrap().parse().unwrap();
    let mut ev = Vec::new();
    for l in it {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.is_empty() { continue; }
        match f[0] {
            "a" => ev.push(Ev::A(f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap())),
            "r" => ev.push(Ev::R(f[1].parse().unwrap(), f[2] == "1")),
            "c" => ev.push(Ev::C(f[1].parse().unwrap())),
            _ => {}
        }
    }
    (n, ev)
}
#[derive(Clone, Copy, PartialEq, Debug)]
enum Coal { Now, Never, OnDemand, Runs }
#[derive(Clone, Copy, PartialEq, Debug)]
enum Pick { Newest, Best, First, BestNewest, Oldest }
struct Cfg { coal: Coal, exact: Option<Pick>, pick: Pick }
struct Sim { free: BTreeMap<u64, (u64, u64)>, stamp: u64, top: u64, chunks: Vec<u32>, live: u64, peak: u64 }
impl Sim {
    fn choose(&self, s: u64, pick: Pick, exact: bool) -> Option<u64> {
        let mut best: Option<(u64, u64, u64)> = None; // (start,len,stamp)
        for (&st, &(en, sp)) in &self.free {
            let len = en - st;
            if len < s || (exact && len != s) { continue; }
            let better = match best { None => true, Some((bs, bl, bsp)) => match pick {
                Pick::Newest => sp > bsp,
                Pick::Oldest => sp < bsp,
                Pick::Best => len < bl || (len == bl && st < bs),
                Pick::BestNewest => len < bl || (len == bl && sp > bsp),
                Pick::First => st < bs,
            }};
            if better { best = Some((st, len, sp)); }
        }
        best.map(|b| b.0)
    }
    fn choose_runs(&self, s: u64, pick: Pick, exact: Option<Pick>) -> Option<u64> {
        // run length from each block start (adjacent free blocks; reaching the top = unbounded)
        let v: Vec<(u64, u64, u64)> = self.free.iter().map(|(&a, &(b, c))| (a, b, c)).collect();
        let mut run = vec![0u64; v.len()];
        for j in (0..v.len()).rev() {
            let (st, en, _) = v[j];
            run[j] = if en == self.top { u64::MAX } else if j + 1 < v.len() && v[j + 1].0 == en { (en - st).saturating_add(run[j + 1]) } else { en - st };
        }
        if let Some(xp) = exact {
            let mut best: Option<usize> = None;
            for j in 0..v.len() { if v[j].1 - v[j].0 == s { best = match best { None => Some(j), Some(b) => Some(match xp { Pick::Newest => if v[j].2 > v[b].2 { j } else { b }, _ => b }) }; } }
            if let Some(b) = best { return Some(v[b].0); }
        }
        let mut best: Option<usize> = None;
        for j in 0..v.len() {
            if run[j] < s { continue; }
            best = match best { None => Some(j), Some(b) => Some(match pick {
                Pick::Newest => if v[j].2 > v[b].2 { j } else { b },
                Pick::Oldest => if v[j].2 < v[b].2 { j } else { b },
                Pick::Best | Pick::BestNewest => if run[j] < run[b] || (run[j] == run[b] && pick == Pick::BestNewest && v[j].2 > v[b].2) { j } else { b },
                Pick::First => b,
            })};
        }
        best.map(|b| v[b].0)
    }
    fn take_run(&mut self, off: u64, s: u64) {
        let end = off + s;
        let keys: Vec<u64> = self.free.range(off..end).map(|(&k, _)| k).collect();
        for k in keys {
            let (en, _) = self.free.remove(&k).unwrap();
            if en > end { self.stamp += 1; self.free.insert(end, (en, self.stamp)); }
        }
        if end > self.top { self.top = end; }
    }
    fn coalesce_all(&mut self) {
        let old = std::mem::take(&mut self.free);
        let mut cur: Option<(u64, u64, u64)> = None;
        for (st, (en, sp)) in old {
            match cur { Some((cs, ce, csp)) if ce == st => cur = Some((cs, en, csp.max(sp))),
                Some(c) => { self.free.insert(c.0, (c.1, c.2)); cur = Some((st, en, sp)); }
                None => cur = Some((st, en, sp)) }
        }
        if let Some(c) = cur { self.free.insert(c.0, (c.1, c.2)); }
    }
    fn touch(&mut self, off: u64, s: u64, d: i32) {
        for c in (off / CH)..=((off + s - 1) / CH) {
            let c = c as usize;
            if self.chunks.len() <= c { self.chunks.resize(c + 1, 0); }
            if d > 0 { self.chunks[c] += 1; if self.chunks[c] == 1 { self.live += 1; } }
            else { self.chunks[c] -= 1; if self.chunks[c] == 0 { self.live -= 1; } }
        }
        self.peak = self.peak.max(self.live);
    }
}
fn run(ev: &[Ev], n: usize, cfg: &Cfg, real: Option<&Vec<u64>>) -> (u64, f64) {
    let mut sim = Sim { free: BTreeMap::new(), stamp: 0, top: 0, chunks: vec![], live: 0, peak: 0 };
    let mut off = vec![u64::MAX; n]; let mut sz = vec![0u64; n];
    let (mut hit, mut tot) = (0u64, 0u64);
    // map real addresses to offsets relative to min
    let rbase = real.map(|r| { let mut b = 0; for e in ev { if let Ev::A(i, sz, _) = *e { if sz > 0 { b = r[i]; break; } } } b });
    for e in ev { match *e {
        Ev::A(i, size, _st) => {
            if size == 0 { continue; }
            let s = size.div_ceil(512) * 512; sz[i] = s;
            let mut p = None;
            if cfg.coal == Coal::Runs {
                let o = sim.choose_runs(s, cfg.pick, cfg.exact).unwrap_or(sim.top);
                sim.take_run(o, s);
                off[i] = o; sim.touch(o, s, 1);
                continue;
            }
            if let Some(xp) = cfg.exact { p = sim.choose(s, xp, true); }
            if p.is_none() { p = sim.choose(s, cfg.pick, false); }
            if p.is_none() && cfg.coal == Coal::OnDemand { sim.coalesce_all(); p = sim.choose(s, cfg.pick, false); }
            let o = match p {
                Some(st) => { let (en, _) = sim.free.remove(&st).unwrap();
                    if en > st + s { sim.stamp += 1; sim.free.insert(st + s, (en, sim.stamp)); } st }
                None => { let o = sim.top; sim.top += s; o }
            };
            off[i] = o; sim.touch(o, s, 1);
            if let (Some(r), Some(rb)) = (real, rbase) { if r[i] != 0 { tot += 1; if r[i] - rb == o { hit += 1; } } }
        }
        Ev::R(i, _) | Ev::C(i) => {
            let is_c = matches!(e, Ev::C(_));
            // release at 'r' unless deferred (then at 'c')
            let deferred = matches!(e, Ev::R(_, true));
            if (is_c && off[i] == u64::MAX) || deferred { continue; }
            if off[i] == u64::MAX { continue; }
            let (o, s) = (off[i], sz[i]); off[i] = u64::MAX;
            sim.touch(o, s, -1);
            let (mut st, mut en) = (o, o + s);
            if cfg.coal == Coal::Now {
                if let Some((&ps, &(pe, _))) = sim.free.range(..st).next_back() { if pe == st { sim.free.remove(&ps); st = ps; } }
                if let Some(&(ne, _)) = sim.free.get(&en) { sim.free.remove(&en); en = ne; }
            }
            sim.stamp += 1; sim.free.insert(st, (en, sim.stamp));
        }
    }}
    (sim.peak, if tot > 0 { hit as f64 / tot as f64 } else { f64::NAN })
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (n, ev) = load(&args[1]);
    let real: Option<Vec<u64>> = args.get(2).filter(|p| !p.is_empty() && p.as_str() != "-").map(|p| {
        let mut v = vec![0u64; n];
        for l in std::fs::read_to_string(p).unwrap().lines() { let f: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect(); v[f[0] as usize] = f[1]; }
        v });
    let picks = [("newest", Pick::Newest), ("best", Pick::Best), ("first", Pick::First), ("bestnew", Pick::BestNewest), ("oldest", Pick::Oldest)];
    for coal in [Coal::Now, Coal::Never, Coal::OnDemand, Coal::Runs] {
        for ex in [None, Some(Pick::Newest), Some(Pick::First)] {
            for (pn, pk) in picks {
                let cfg = Cfg { coal, exact: ex, pick: pk };
                if let Ok(f) = std::env::var("ONLY") { if !f.split(';').any(|x| x == format!("{:?}/{:?}/{}", coal, ex, pn)) { continue; } }
                let (peak, m) = run(&ev, n, &cfg, real.as_ref());
                println!("{:?}\t{:?}\t{}\t{}\t{:.3}", coal, ex, pn, peak, m);
            }
        }
    }
}
