//! A small disk for a cluster's data directory: a `tmpfs` of a fixed size mounted on
//! it (root only), which a test fills to the last byte and frees again, as a disk that
//! fills up in production does.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted `tmpfs`; unmounted (lazily, so a server still holding files does not
/// stop it) when dropped.
#[derive(Debug)]
pub struct SmallDisk {
    at: PathBuf,
}

/// The file [`SmallDisk::fill`] writes.
const FILLER: &str = "protomolt-disk-filler";

impl SmallDisk {
    /// Mounts a `tmpfs` of `megabytes` on `at` (made when missing). Panics, saying how
    /// to leave the fault out, when mounting is not allowed (it needs root).
    pub fn mount(at: &Path, megabytes: u64) -> SmallDisk {
        std::fs::create_dir_all(at).expect("the mount point");
        let output = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={megabytes}m,mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .expect("mount runs");
        assert!(
            output.status.success(),
            "mounting a {megabytes} MiB tmpfs on {} failed (a full disk needs root): {}",
            at.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        SmallDisk { at: at.to_owned() }
    }

    /// Whether this process may mount one (it runs as root).
    pub fn allowed() -> bool {
        running_as_root()
    }

    /// Writes a file until the disk refuses another byte; answers how many it took.
    pub fn fill(&self) -> u64 {
        let path = self.at.join(FILLER);
        let mut file = std::fs::File::create(&path).expect("the filler file");
        let mut written = 0u64;
        // Big pieces first, then single pages, so no room is left between them.
        for size in [1 << 20, 4096, 1] {
            let piece = vec![0u8; size];
            while file.write_all(&piece).is_ok() {
                written += size as u64;
            }
        }
        let _ = file.flush();
        written
    }

    /// Deletes what [`Self::fill`] wrote.
    pub fn free(&self) {
        match std::fs::remove_file(self.at.join(FILLER)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                panic!("freeing the small disk at {}: {e}", self.at.display())
            }
            _ => {}
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).output();
    }
}

/// Whether this process runs as root.
pub(super) fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
