//! `IdMap`: the policies' live allocations by allocation id, in memory O(live allocations).
//!
//! Ids are dense per trace (0 .. events) and mostly allocated in order, so a vector indexed by
//! id was the fast choice, but it grows with the trace: a 100 M-event trace has ~33 M ids, and a
//! vector of 24-byte entries alone takes 800 MB (issue #12: 100 M events within 2 GiB). Here the
//! ids are cut into pages of [`PAGE`] slots; a page exists only while one of its ids is live, so
//! memory is a page per live allocation at worst (a few pages per repetition of a tiled trace:
//! most ids of a page die together) plus one pointer per [`PAGE`] ids. A lookup is two indexed
//! loads, no hashing; iteration is in id order, as the vectors' was.

/// Slots per page.
const PAGE_BITS: u32 = 8;
const PAGE: usize = 1 << PAGE_BITS;

#[derive(Debug, Clone)]
struct Page<T> {
    live: u32,
    slots: [Option<T>; PAGE],
}

#[derive(Debug, Clone)]
pub struct IdMap<T> {
    pages: Vec<Option<Box<Page<T>>>>,
    len: usize,
    /// The last page that emptied (every slot `None`), kept for the next page needed: ids move
    /// on by a page every [`PAGE`] allocations, and a fresh page is an allocation and a fill.
    spare: Option<Box<Page<T>>>,
}

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap { pages: Vec::new(), len: 0, spare: None }
    }
}

#[inline]
fn split(id: u64) -> (usize, usize) {
    ((id >> PAGE_BITS) as usize, (id as usize) & (PAGE - 1))
}

impl<T: Copy> IdMap<T> {
    #[inline]
    pub fn get(&self, id: u64) -> Option<T> {
        let (p, s) = split(id);
        self.pages.get(p)?.as_ref()?.slots[s]
    }

    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (p, s) = split(id);
        self.pages.get_mut(p)?.as_mut()?.slots[s].as_mut()
    }

    /// Sets `id`'s value; the previous one, if any. A new page is made out of line, so that
    /// the common case stays small enough to inline.
    #[inline]
    pub fn insert(&mut self, id: u64, value: T) -> Option<T> {
        let (p, s) = split(id);
        let page = match self.pages.get_mut(p) {
            Some(Some(_)) => self.pages[p].as_mut().unwrap(),
            _ => self.new_page(p),
        };
        let old = page.slots[s].replace(value);
        if old.is_none() {
            page.live += 1;
            self.len += 1;
        }
        old
    }

    /// Page `p`, made (or the spare page taken) for the first id of it.
    #[cold]
    #[inline(never)]
    fn new_page(&mut self, p: usize) -> &mut Page<T> {
        if p >= self.pages.len() {
            self.pages.resize_with(p + 1, || None);
        }
        let spare = &mut self.spare;
        self.pages[p].get_or_insert_with(|| spare.take().unwrap_or_else(|| Box::new(Page { live: 0, slots: [None; PAGE] })))
    }

    /// Removes `id`'s value; the page goes once none of its ids is live.
    #[inline]
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let (p, s) = split(id);
        let slot = self.pages.get_mut(p)?;
        let page = slot.as_mut()?;
        let old = page.slots[s].take()?;
        page.live -= 1;
        self.len -= 1;
        if page.live == 0 {
            self.spare = slot.take();
        }
        Some(old)
    }

    /// Live ids.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The values, in id order.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.pages.iter().flatten().flat_map(|p| p.slots.iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_and_go_with_their_live_ids() {
        let mut m = IdMap::default();
        assert_eq!(m.get(5), None::<u32>);
        assert_eq!(m.insert(5, 50), None);
        assert_eq!(m.insert(5, 51), Some(50));
        m.insert(1000, 7);
        m.insert(3, 30);
        assert_eq!((m.len(), m.get(5), m.get(4), m.get(1 << 40)), (3, Some(51), None, None));
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![30, 51, 7]);
        *m.get_mut(1000).unwrap() += 1;
        assert_eq!(m.remove(1000), Some(8));
        assert_eq!(m.remove(1000), None);
        assert!(m.pages[split(1000).0].is_none());
        m.remove(3);
        m.remove(5);
        assert!(m.len() == 0 && m.pages.iter().all(|p| p.is_none()));
        // A page that emptied serves the next page needed, empty.
        assert!(m.spare.is_some());
        m.insert(5000, 1);
        assert!(m.spare.is_none());
        assert_eq!((m.len(), m.get(5001), m.values().copied().collect::<Vec<_>>()), (1, None, vec![1]));
    }
}
