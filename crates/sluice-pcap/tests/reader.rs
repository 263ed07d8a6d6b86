//! The reader on good files of both formats and on every kind of damage: cut at every byte,
//! absurd lengths, wrong magic. Nothing panics; every error names the frame and offset.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, TsResolution};
use sluice_pcap::{CaptureReader, CaptureWriter, Error, ErrorKind, Frame, LinkType};
use std::borrow::Cow;
use std::time::Duration;

fn frames(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| (0..(14 + i * 7)).map(|b| (b * 31 + i) as u8).collect())
        .collect()
}

fn pcap_file(
    endianness: Endianness,
    ts: TsResolution,
    link: DataLink,
    data: &[Vec<u8>],
) -> Vec<u8> {
    let header = PcapHeader {
        datalink: link,
        endianness,
        ts_resolution: ts,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).expect("header");
    for (i, d) in data.iter().enumerate() {
        let ts = Duration::new(1_700_000_000 + i as u64, 1000 * i as u32);
        w.write_packet(&PcapPacket::new(ts, d.len() as u32, d))
            .expect("write");
    }
    w.into_writer()
}

/// Two interfaces (RAW, then Ethernet); packets alternate between them.
fn pcapng_file(endianness: Endianness, data: &[Vec<u8>]) -> Vec<u8> {
    let section = pcap_file::pcapng::blocks::section_header::SectionHeaderBlock {
        endianness,
        ..Default::default()
    };
    let mut w = PcapNgWriter::with_section_header(Vec::new(), section).expect("section");
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::RAW, 65535))
        .expect("idb");
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535))
        .expect("idb");
    for (i, d) in data.iter().enumerate() {
        let epb = EnhancedPacketBlock {
            interface_id: (i % 2) as u32,
            timestamp: Duration::from_micros(1_700_000_000_000_000 + i as u64),
            original_len: d.len() as u32,
            data: Cow::Borrowed(&d[..]),
            options: vec![],
        };
        w.write_pcapng_block(epb).expect("epb");
    }
    w.into_inner()
}

fn read_all(bytes: &[u8]) -> (Vec<Frame>, Option<Error>) {
    let mut r = match CaptureReader::from_reader("t", bytes) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut out = Vec::new();
    while let Some(f) = r.next_frame() {
        match f {
            Ok(f) => out.push(f),
            Err(e) => {
                assert!(r.next_frame().is_none(), "the reader ends after an error");
                return (out, Some(e));
            }
        }
    }
    (out, None)
}

#[test]
fn pcap_in_both_byte_orders_and_resolutions() {
    let data = frames(5);
    for e in [Endianness::Big, Endianness::Little] {
        for ts in [TsResolution::MicroSecond, TsResolution::NanoSecond] {
            let (got, err) = read_all(&pcap_file(e, ts, DataLink::ETHERNET, &data));
            assert!(err.is_none(), "{err:?}");
            assert_eq!(got.len(), 5);
            for (i, f) in got.iter().enumerate() {
                assert_eq!(f.data, data[i]);
                assert_eq!(f.linktype, LinkType::Ethernet);
                assert_eq!(
                    f.timestamp,
                    Duration::new(1_700_000_000 + i as u64, 1000 * i as u32)
                );
            }
        }
    }
}

#[test]
fn pcap_link_types_are_reported() {
    for (dl, lt) in [
        (DataLink::RAW, LinkType::RawIp),
        (DataLink::from(12), LinkType::RawIp),
        (DataLink::from(14), LinkType::RawIp),
        (DataLink::IPV4, LinkType::Ipv4),
        (DataLink::IPV6, LinkType::Ipv6),
        (DataLink::LINUX_SLL, LinkType::LinuxSll),
        (DataLink::IEEE802_11, LinkType::Other(105)),
    ] {
        let bytes = pcap_file(
            Endianness::Little,
            TsResolution::MicroSecond,
            dl,
            &frames(1),
        );
        let r = CaptureReader::from_reader("t", &bytes[..]).expect("open");
        assert_eq!(r.pcap_linktype(), Some(lt));
        let (got, err) = read_all(&bytes);
        assert!(err.is_none());
        assert_eq!(got[0].linktype, lt);
    }
}

#[test]
fn pcapng_frames_carry_their_interface_link_type() {
    let data = frames(6);
    for e in [Endianness::Big, Endianness::Little] {
        let (got, err) = read_all(&pcapng_file(e, &data));
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got.len(), 6);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f.data, data[i]);
            let want = if i % 2 == 0 {
                LinkType::RawIp
            } else {
                LinkType::Ethernet
            };
            assert_eq!(f.linktype, want);
        }
    }
}

/// The offsets where a record or block ends (a clean end of file is possible there).
fn record_boundaries(file: &[u8]) -> Vec<usize> {
    let u32_at = |at: usize, big: bool| {
        let b: [u8; 4] = file[at..at + 4].try_into().expect("4 bytes");
        if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let mut out = Vec::new();
    if file[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        let big = file[8] == 0x1a;
        let mut at = 0;
        while at < file.len() {
            at += u32_at(at + 4, big) as usize;
            out.push(at);
        }
    } else {
        let big = file[0] == 0xa1;
        let mut at = 24;
        out.push(at);
        while at < file.len() {
            at += 16 + u32_at(at + 8, big) as usize;
            out.push(at);
        }
    }
    out
}

/// Every prefix of a good file: the whole frames before the cut, then either a clean end (a
/// cut between records) or an error naming the next frame and its offset; never a panic.
#[test]
fn a_file_cut_anywhere_gives_its_whole_frames_then_an_error_with_context() {
    let data = frames(4);
    let files = [
        pcap_file(
            Endianness::Little,
            TsResolution::NanoSecond,
            DataLink::ETHERNET,
            &data,
        ),
        pcap_file(
            Endianness::Big,
            TsResolution::MicroSecond,
            DataLink::ETHERNET,
            &data,
        ),
        pcapng_file(Endianness::Little, &data),
        pcapng_file(Endianness::Big, &data),
    ];
    for file in &files {
        // Where each frame's record ends.
        let mut r = CaptureReader::from_reader("t", &file[..]).expect("open");
        let mut ends = vec![r.bytes_read()];
        while let Some(f) = r.next_frame() {
            f.expect("good");
            ends.push(r.bytes_read());
        }
        assert_eq!(*ends.last().expect("end"), file.len() as u64);
        let boundaries = record_boundaries(file);
        for cut in 0..file.len() {
            let (got, err) = read_all(&file[..cut]);
            for (i, f) in got.iter().enumerate() {
                assert_eq!(f.data, data[i]);
            }
            match err {
                None => assert!(boundaries.contains(&cut), "cut {cut}"),
                Some(e) => {
                    if let Some(n) = e.frame() {
                        assert_eq!(n, got.len() as u64 + 1, "cut {cut}: {e}");
                        let off = e.offset().expect("offset");
                        assert!(off < cut as u64 && off >= ends[got.len()], "cut {cut}: {e}");
                        assert!(e
                            .to_string()
                            .starts_with(&format!("t: frame {n}: corrupt ")));
                        assert!(e.to_string().ends_with(&format!("(byte offset {off})")));
                    } else {
                        // Only the file header can fail without a frame number.
                        assert!(got.is_empty() && cut < 40, "cut {cut}: {e}");
                    }
                }
            }
        }
    }
}

#[test]
fn absurd_record_lengths_are_refused_before_allocating() {
    let mut file = pcap_file(
        Endianness::Little,
        TsResolution::MicroSecond,
        DataLink::ETHERNET,
        &frames(2),
    );
    // The second record's captured length: 0xffff_fff0.
    let second = 24 + 16 + 14;
    file[second + 8..second + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let (got, err) = read_all(&file);
    assert_eq!(got.len(), 1);
    let err = err.expect("error");
    assert!(matches!(
        err.kind(),
        ErrorKind::BadLength {
            pcapng: false,
            len: 0xffff_fff0
        }
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "t: frame 2: corrupt pcap record: captured length 4294967280 is more than 16777216 bytes (byte offset {second})"
        )
    );

    // A pcapng block that claims 4 GiB, one that claims 8 bytes and one not a multiple of 4.
    let good = pcapng_file(Endianness::Little, &frames(1));
    let epb = good.len() - (12 + 20 + 16);
    for bad in [0xffff_fffcu32, 8, 0x101] {
        let mut file = good.clone();
        file[epb + 4..epb + 8].copy_from_slice(&bad.to_le_bytes());
        let (got, err) = read_all(&file);
        assert!(got.is_empty());
        let err = err.expect("error");
        assert!(
            matches!(err.kind(), ErrorKind::BadLength { pcapng: true, .. }),
            "{err}"
        );
        assert_eq!(err.offset(), Some(epb as u64));
    }
}

#[test]
fn wrong_magic_short_files_and_bad_headers_are_errors() {
    let (_, e) = read_all(b"definitely not a capture");
    let e = e.expect("error");
    assert_eq!(
        e.to_string(),
        "t: not a pcap or pcapng file (magic number 0x69666564)"
    );
    let (_, e) = read_all(&[0xd4, 0xc3]);
    assert_eq!(
        e.expect("error").to_string(),
        "t: too short to be a capture (2 bytes)"
    );
    let (_, e) = read_all(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0]);
    assert!(e
        .expect("error")
        .to_string()
        .starts_with("t: bad pcap header: truncated"));
    // A pcapng section header with a bad byte-order magic.
    let mut ng = pcapng_file(Endianness::Little, &frames(1));
    ng[8] = 0;
    let (_, e) = read_all(&ng);
    assert!(e
        .expect("error")
        .to_string()
        .contains("bad pcapng section header: section header with an unknown byte-order magic"));
}

#[test]
fn opening_a_missing_file_names_it() {
    let e = CaptureReader::open(std::path::Path::new("/nonexistent/x.pcap"))
        .err()
        .expect("error");
    assert!(matches!(e.kind(), ErrorKind::Open(_)));
    assert!(e
        .to_string()
        .starts_with("cannot open capture /nonexistent/x.pcap: "));
}

#[test]
fn writer_round_trips_every_link_type_and_refuses_oversized_frames() {
    for lt in [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::Ipv6,
        LinkType::LinuxSll,
    ] {
        let mut w = CaptureWriter::new("w", Vec::new(), lt).expect("writer");
        w.write(Duration::new(5, 123_456_789), &[1, 2, 3])
            .expect("write");
        w.write(Duration::ZERO, &vec![7u8; 65_536 + 100])
            .expect("a 64 KiB super-frame fits");
        let e = w
            .write(
                Duration::ZERO,
                &vec![0u8; sluice_pcap::SNAPLEN as usize + 1],
            )
            .expect_err("too big");
        assert!(e.to_string().starts_with("w: cannot write a frame: "));
        let bytes = w.finish().expect("finish");
        let (got, err) = read_all(&bytes);
        assert!(err.is_none());
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].linktype, lt);
        assert_eq!(got[0].timestamp, Duration::new(5, 123_456_789));
        assert_eq!(got[0].data, [1, 2, 3]);
        assert_eq!(got[1].data.len(), 65_636);
    }
}
