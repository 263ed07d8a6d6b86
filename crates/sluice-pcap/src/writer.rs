//! The writer: pcap with nanosecond timestamps.

use crate::error::{Error, ErrorKind};
use crate::LinkType;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::TsResolution;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

/// The snap length of the captures [`CaptureWriter`] writes: 256 KiB, room for 64 KiB GSO
/// super-frames with any headers.
pub const SNAPLEN: u32 = 262_144;

/// A pcap capture (nanosecond timestamps, [`SNAPLEN`]) opened for writing.
pub struct CaptureWriter<W: Write = BufWriter<File>> {
    inner: PcapWriter<W>,
    name: String,
}

impl CaptureWriter {
    /// Creates (or truncates) `path` as an Ethernet capture.
    pub fn create(path: &Path) -> Result<CaptureWriter, Error> {
        CaptureWriter::create_with(path, LinkType::Ethernet)
    }

    /// Creates (or truncates) `path` as a capture of link type `linktype`.
    pub fn create_with(path: &Path, linktype: LinkType) -> Result<CaptureWriter, Error> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| Error::new(&name, ErrorKind::Create(e)))?;
        CaptureWriter::new(&name, BufWriter::new(file), linktype)
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Writes a pcap header of link type `linktype` to `out`; `name` is what errors call it.
    pub fn new(name: &str, out: W, linktype: LinkType) -> Result<CaptureWriter<W>, Error> {
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: linktype.into(),
            ts_resolution: TsResolution::NanoSecond,
            ..PcapHeader::default()
        };
        let inner = PcapWriter::with_header(out, header).map_err(|e| {
            Error::new(
                name,
                ErrorKind::Write {
                    what: "the pcap header",
                    reason: e.to_string(),
                },
            )
        })?;
        Ok(CaptureWriter {
            inner,
            name: name.to_string(),
        })
    }

    /// Appends one frame, captured whole (its length on the wire is its length), at most
    /// [`SNAPLEN`] bytes.
    pub fn write(&mut self, timestamp: Duration, data: &[u8]) -> Result<(), Error> {
        let fail = |reason: String| {
            Error::new(
                &self.name,
                ErrorKind::Write {
                    what: "a frame",
                    reason,
                },
            )
        };
        let len = u32::try_from(data.len())
            .ok()
            .filter(|&l| l <= SNAPLEN)
            .ok_or_else(|| fail(format!("{} bytes, more than {SNAPLEN}", data.len())))?;
        self.inner
            .write_packet(&PcapPacket::new(timestamp, len, data))
            .map_err(|e| fail(e.to_string()))?;
        Ok(())
    }

    /// Flushes what is buffered; the writer back.
    pub fn finish(self) -> Result<W, Error> {
        let mut out = self.inner.into_writer();
        out.flush().map_err(|e| {
            Error::new(
                &self.name,
                ErrorKind::Write {
                    what: "the end of the capture (flush)",
                    reason: e.to_string(),
                },
            )
        })?;
        Ok(out)
    }
}
