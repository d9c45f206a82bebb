//! Workers are interchangeable: the checker visits one state of each set that differs only in
//! how its workers are numbered.

use stateright::Representative;

use crate::state::{Message, State};

impl State {
    /// This state with its workers renumbered: worker `w` becomes `to[w]`.
    fn renumbered(&self, to: &[usize]) -> State {
        let mut s = self.clone();
        for (w, job) in self.workers.iter().enumerate() {
            s.workers[to[w]] = *job;
        }
        for row in s.outbox.iter_mut().flatten() {
            row.owner = row.owner.map(|w| to[w]);
        }
        for m in &mut s.network {
            match m {
                Message::Request { worker, .. } | Message::Answer { worker, .. } => {
                    *worker = to[*worker];
                }
            }
        }
        s.network.sort();
        s
    }
}

/// Workers are interchangeable: a state and the same state with its workers renumbered behave
/// alike, so the checker visits one of them (the least, under every renumbering).
impl Representative for State {
    fn representative(&self) -> Self {
        let mut best = self.clone();
        let mut to: Vec<usize> = (0..self.workers.len()).collect();
        permute(&mut to, 0, &mut |to| {
            let s = self.renumbered(to);
            if s < best {
                best = s;
            }
        });
        best
    }
}

/// Calls `f` with every ordering of `items[k..]` (the first `k` fixed).
fn permute(items: &mut [usize], k: usize, f: &mut impl FnMut(&[usize])) {
    if k == items.len() {
        f(items);
        return;
    }
    for j in k..items.len() {
        items.swap(k, j);
        permute(items, k + 1, f);
        items.swap(k, j);
    }
}
