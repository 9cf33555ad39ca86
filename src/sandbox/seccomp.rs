//! Where a sandbox has no root of its own (the system gives loopd no user
//! namespace), a pathname Unix socket of the user's session — a D-Bus bus,
//! an agent socket, a container engine's — could be named and connected
//! to: Landlock (up to ABI 7) does not govern `connect(2)`, and a seccomp
//! filter cannot read the address a call passes. So there, no process of
//! the job may make a Unix socket at all: `socket(AF_UNIX, …)` fails with
//! `EACCES` (a socket pair, `socketpair(2)`, still works: it names nothing
//! outside). A system call of another architecture's table (a 32-bit
//! program's `socketcall`) fails too, so the filter cannot be walked
//! around. Refused, not ignored: on an architecture this module has no
//! table for, [`Ban::unix_sockets`] has none and the sandbox is refused.

/// `struct sock_filter`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct Prog {
    len: u16,
    filter: *const Insn,
}

/// `BPF_LD | BPF_W | BPF_ABS` (the first two are 0).
const LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`, `BPF_JMP | BPF_JGE | BPF_K`, `BPF_RET | BPF_K`.
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;

/// `seccomp_data`: `nr` at 0, `arch` at 4, `args[0]` (its low half, little
/// endian) at 16.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0: u32 = 16;

#[cfg(target_arch = "x86_64")]
const TABLE: Option<(u32, u32)> = Some((0xC000_003E, 41));
#[cfg(target_arch = "aarch64")]
const TABLE: Option<(u32, u32)> = Some((0xC000_00B7, 198));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const TABLE: Option<(u32, u32)> = None;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The filter: another architecture's calls and `socket(AF_UNIX, …)` fail
/// with `EACCES`; everything else is allowed.
const fn program(arch: u32, socket: u32) -> [Insn; 9] {
    let deny = RET_ERRNO | libc::EACCES as u32;
    [
        insn(LD_W_ABS, 0, 0, ARCH),
        insn(JEQ_K, 1, 0, arch),
        insn(RET_K, 0, 0, deny),
        insn(LD_W_ABS, 0, 0, NR),
        // The x32 table (x86_64) lies above 0x40000000.
        insn(JGE_K, 3, 0, 0x4000_0000),
        insn(JEQ_K, 0, 3, socket),
        insn(LD_W_ABS, 0, 0, ARG0),
        insn(JEQ_K, 0, 1, libc::AF_UNIX as u32),
        insn(RET_K, 0, 0, deny),
    ]
}

/// The program installed, with its final "allow" (the jumps above land on
/// index 8 to deny, 9 to allow).
static FILTER: std::sync::OnceLock<Option<[Insn; 10]>> = std::sync::OnceLock::new();

fn filter() -> Option<&'static [Insn; 10]> {
    FILTER
        .get_or_init(|| {
            let (arch, socket) = TABLE?;
            let p = program(arch, socket);
            let mut all = [insn(RET_K, 0, 0, RET_ALLOW); 10];
            all[..9].copy_from_slice(&p);
            Some(all)
        })
        .as_ref()
}

/// Made before the fork: what [`install`] hands the kernel.
#[derive(Clone, Copy)]
pub struct Ban {
    prog: &'static [Insn; 10],
}

// SAFETY: a pointer to a static program, read only.
unsafe impl Send for Ban {}
// SAFETY: same.
unsafe impl Sync for Ban {}

impl std::fmt::Debug for Ban {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ban(AF_UNIX)")
    }
}

impl Ban {
    /// The ban, where this architecture has a table.
    pub fn unix_sockets() -> Option<Ban> {
        filter().map(|prog| Ban { prog })
    }

    /// Install the filter in this thread (between fork and exec, after
    /// `PR_SET_NO_NEW_PRIVS`).
    ///
    /// # Safety
    /// In the forked child only: it makes one system call on static data.
    pub unsafe fn install(self) -> std::io::Result<()> {
        let prog = Prog {
            len: self.prog.len() as u16,
            filter: self.prog.as_ptr(),
        };
        // SAFETY: a valid sock_fprog pointing at a static program.
        let r = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const Prog as libc::c_ulong,
                0,
                0,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_banned_child_makes_no_unix_socket_but_a_pair_and_tcp() {
        let ban = Ban::unix_sockets().expect("the test machines are x86_64 or aarch64");
        let script = format!(
            "{}\nimport socket\ntryit('unix', lambda: socket.socket(socket.AF_UNIX))\ntryit('pair', lambda: socket.socketpair())\ntryit('tcp', lambda: socket.socket(socket.AF_INET))\n",
            super::super::tests::TRYIT
        );
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", &script]);
        // SAFETY: prctl calls only, in the forked child.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                ban.install()
            });
        }
        let out = cmd.output().expect("python3 runs");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in ["unix denied 13", "pair allowed", "tcp allowed"] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
