//! The repository's committed sample capture reads whole (left out of the published package:
//! the sample lives outside the crate).
use sluice_pcap::{CaptureReader, LinkType};

#[test]
fn the_committed_sample_reads_whole() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../samples/mixed.pcap");
    let mut r = CaptureReader::open(&path).expect("open");
    let frames: Vec<_> = r.by_ref().map(|f| f.expect("frame")).collect();
    assert_eq!(frames.len(), 40);
    assert!(frames.iter().all(|f| f.linktype == LinkType::Ethernet));
    assert_eq!(r.bytes_read(), r.file_len().expect("len"));
}
