//! The output capture of the offline pcap tools (`sluice pcap gso|gro`): one link type per file,
//! taken from the first frame written (Ethernet, or raw IP for a capture of TUN traffic), so an
//! L3 capture gives an L3 capture back. A frame of another link type is an error naming it: a
//! pcap file cannot hold it.

use anyhow::{bail, Result};
use sluice_pcap::{CaptureWriter, LinkType};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A capture writer created at the first write, with that frame's link type.
pub struct LinkWriter {
    path: PathBuf,
    writer: Option<(CaptureWriter, LinkType)>,
}

impl LinkWriter {
    /// A writer for `path` (nothing is created yet).
    pub fn new(path: &Path) -> LinkWriter {
        LinkWriter {
            path: path.to_path_buf(),
            writer: None,
        }
    }

    /// Writes `data`, a frame of link type `link`; `frame` (1-based) names it in errors.
    pub fn write(&mut self, frame: u64, link: LinkType, ts: Duration, data: &[u8]) -> Result<()> {
        let (w, have) = match &mut self.writer {
            Some(w) => w,
            None => self
                .writer
                .insert((CaptureWriter::create_with(&self.path, link)?, link)),
        };
        if *have != link {
            bail!(
                "frame {frame}: link type {link:?} in a capture written as {have:?} (a pcap file \
                 holds one link type; split the input by interface)"
            );
        }
        w.write(ts, data)?;
        Ok(())
    }

    /// Finishes the file (an Ethernet capture with no frame if nothing was written).
    pub fn finish(self) -> Result<()> {
        let w = match self.writer {
            Some((w, _)) => w,
            None => CaptureWriter::create(&self.path)?,
        };
        w.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_link_type_is_kept_and_another_is_refused_naming_the_frame() {
        let path = std::env::temp_dir().join(format!("sluice-link-{}.pcap", std::process::id()));
        let mut w = LinkWriter::new(&path);
        w.write(1, LinkType::RawIp, Duration::ZERO, &[0x45, 0, 0, 20])
            .expect("first frame");
        w.write(2, LinkType::RawIp, Duration::ZERO, &[0x45, 0, 0, 20])
            .expect("same link type");
        let e = w
            .write(3, LinkType::Ethernet, Duration::ZERO, &[0; 14])
            .expect_err("another link type");
        assert!(e.to_string().contains("frame 3"), "{e}");
        assert!(e.to_string().contains("Ethernet"), "{e}");
        w.finish().expect("finish");
        let _ = std::fs::remove_file(&path);
    }
}
