//! Fuzzes `sluice-pcap`'s reader on arbitrary bytes, pcap and pcapng (the seeds hold both, so
//! the fuzzer starts past either magic number). Nothing may panic or allocate for a length the
//! input does not back; every frame lies within the input; an error names the next frame and a
//! byte offset inside the input, where the frames read so far end; the reader ends after it.
//!
//! Seeds: `fuzz/seeds/pcap` (small captures of every link type the reader names, both byte
//! orders, both formats).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_pcap::CaptureReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = CaptureReader::from_reader("fuzz", data) else {
        return;
    };
    let len = data.len() as u64;
    let mut frames = 0u64;
    let mut bytes = 0u64;
    while let Some(f) = r.next_frame() {
        match f {
            Ok(f) => {
                frames += 1;
                bytes += f.data.len() as u64;
                assert!(bytes <= len, "frames hold more bytes than the input");
                assert!(r.bytes_read() <= len);
                let _ = f.linktype.ip_packet(&f.data);
            }
            Err(e) => {
                assert_eq!(e.frame(), Some(frames + 1), "{e}");
                let off = e.offset().expect("a record error has an offset");
                assert!(off < len, "{e}");
                assert_eq!(off, r.bytes_read(), "{e}");
                let _ = e.to_string();
                assert!(r.next_frame().is_none(), "the reader ends after an error");
                break;
            }
        }
    }
    assert_eq!(r.frames_read(), frames);
});
