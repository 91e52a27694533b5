//! Derived traces: one device's events of a trace, or its metadata with some keys replaced.
//! `allocreplay capture` writes these (one trace per device; `source_path` pointing at the kept
//! raw capture, or at nothing), through [`super::write_arrow`], the one trace writer.

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::BooleanArray;

use super::{Trace, TraceMetadata};
use crate::error::{Error, Result};

impl Trace {
    /// The events of `device` only. The metadata keeps that device's entry and its recorded
    /// stats (`extra.recorded_stats`, keyed by device), and `seeded` says whether the events
    /// kept include seeds.
    /// A device without events is an error (an empty trace is never what the caller meant).
    pub fn select_device(&self, device: i32) -> Result<Trace> {
        let devices = self.devices();
        if !devices.contains(&device) {
            return Err(Error::InvalidArgument(format!("the trace has no events on device {device} (devices: {devices:?})")));
        }
        let batch = self.batch();
        let keep: BooleanArray = batch.column(5).as_primitive::<Int32Type>().values().iter().map(|&d| Some(d == device)).collect();
        let filtered = arrow_select::filter::filter_record_batch(batch, &keep)
            .map_err(|e| Error::Replay(format!("selecting device {device}: {e}")))?;
        let mut md = self.metadata.clone();
        md.devices.retain(|d| d.index == device);
        if let Some(serde_json::Value::Object(stats)) = md.extra.get_mut("recorded_stats") {
            stats.retain(|k, _| *k == device.to_string());
        }
        let seed = filtered.column(8).as_boolean();
        md.seeded = seed.true_count() > 0;
        let schema = filtered.schema();
        let extra: Vec<_> = schema.fields()[super::schema::core_fields().len()..].iter().map(|f| f.as_ref().clone()).collect();
        Trace::from_parts(md, self.frames.clone(), &extra, filtered.columns().to_vec())
    }

    /// The same events with `patch` merged into the metadata, as JSON Merge Patch does (RFC
    /// 7396) except that `null` sets a key to null instead of removing it: objects merge key
    /// by key, any other value replaces. The result must still be valid metadata.
    pub fn with_metadata_patch(&self, patch: &serde_json::Value) -> Result<Trace> {
        let mut md = serde_json::to_value(&self.metadata).expect("metadata serializes");
        merge(&mut md, patch);
        let md: TraceMetadata = serde_json::from_value(md).map_err(|e| Error::InvalidArgument(format!("metadata override: {e}")))?;
        if md.format_version != self.metadata.format_version {
            return Err(Error::InvalidArgument("metadata override: format_version cannot be changed".into()));
        }
        let batch = self.batch();
        let extra: Vec<_> = batch.schema().fields()[super::schema::core_fields().len()..].iter().map(|f| f.as_ref().clone()).collect();
        Trace::from_parts(md, self.frames.clone(), &extra, batch.columns().to_vec())
    }
}

fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Action, DeviceInfo, EventRow, FrameTable, TraceBuilder};
    use serde_json::json;

    /// Device 0: a seeded alloc, then an alloc; device 1: one alloc.
    fn two_devices() -> Trace {
        let mut b = TraceBuilder::with_capacity(3);
        let mut r = EventRow::new(Action::Alloc, 512);
        r.alloc_id = Some(0);
        r.seed = true;
        b.push(&r);
        r.alloc_id = Some(1);
        r.device = 1;
        r.seed = false;
        b.push(&r);
        r.alloc_id = Some(2);
        r.device = 0;
        b.push(&r);
        let mut md = TraceMetadata::new("test");
        md.devices = vec![DeviceInfo { index: 0, ..Default::default() }, DeviceInfo { index: 1, ..Default::default() }];
        md.extra.insert("recorded_stats".into(), json!({"0": {"num_ooms": 0}, "1": {"num_ooms": 3}}));
        b.finish(md, FrameTable::default()).unwrap()
    }

    #[test]
    fn selecting_a_device_keeps_its_events_entry_and_stats() {
        let t = two_devices();
        let d1 = t.select_device(1).unwrap();
        assert_eq!(d1.num_events(), 1);
        assert_eq!(d1.devices(), vec![1]);
        assert_eq!(d1.metadata.devices.iter().map(|d| d.index).collect::<Vec<_>>(), vec![1]);
        assert_eq!(d1.metadata.extra["recorded_stats"], json!({"1": {"num_ooms": 3}}));
        // Only device 0 holds the seed.
        assert!(!d1.metadata.seeded);
        let d0 = t.select_device(0).unwrap();
        assert_eq!(d0.num_events(), 2);
        assert!(d0.metadata.seeded);
        assert!(matches!(t.select_device(2), Err(Error::InvalidArgument(m)) if m.contains("device 2")));
    }

    #[test]
    fn a_patch_replaces_keys_and_merges_objects() {
        let t = two_devices().with_metadata_patch(&json!({"source_path": "raw.pickle"})).unwrap();
        let t = t.with_metadata_patch(&json!({"source_path": null, "extra": {"meta_path": null}})).unwrap();
        assert_eq!(t.metadata.source_path, None);
        assert_eq!(t.metadata.extra["meta_path"], serde_json::Value::Null);
        // The other extra keys survive the merge.
        assert!(t.metadata.extra.contains_key("recorded_stats"));
        assert!(matches!(t.with_metadata_patch(&json!({"devices": "x"})), Err(Error::InvalidArgument(_))));
        assert!(matches!(t.with_metadata_patch(&json!({"format_version": 99})), Err(Error::InvalidArgument(_))));
    }
}
