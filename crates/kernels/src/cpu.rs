//! CPU levels: which instruction set the kernels use, and a cap that turns the higher ones
//! off at run time, so that one machine can run (and test) every level it has.
//!
//! Every level computes the same bits (the kernels' definitions are exact in their integer
//! parts and fixed in their float ones), so the cap changes speed only. The levels a build
//! has are those its target features allow (`target-cpu=native`: the build machine's).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

/// A CPU level, from the plainest up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Portable scalar code (the kernels' definition).
    Scalar,
    /// AVX2 with FMA and F16C (x86-64-v3).
    Avx2,
    /// AVX2 with AVX-VNNI's 256-bit integer dot products.
    Avx2Vnni,
    /// AVX-512 with VNNI (its integer dot products on 256-bit registers for decode steps and
    /// on 512-bit ones, sixteen weight rows at a time, for batches; the float weights' tile
    /// on 512-bit ones).
    Avx512,
}

impl Level {
    /// Every level, from the plainest up.
    pub const ALL: [Level; 4] = [Level::Scalar, Level::Avx2, Level::Avx2Vnni, Level::Avx512];

    /// The level's name, as `--cpu-level` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx2Vnni => "avx2-vnni",
            Level::Avx512 => "avx512",
        }
    }

    /// Whether this build has the level's path compiled in.
    pub fn compiled(self) -> bool {
        match self {
            Level::Scalar => true,
            Level::Avx2 => cfg!(vector),
            Level::Avx2Vnni => cfg!(all(vector, target_feature = "avxvnni")),
            Level::Avx512 => cfg!(all(
                vector,
                target_feature = "avx512vnni",
                target_feature = "avx512vl"
            )),
        }
    }

    /// The level, when this build has it.
    ///
    /// # Errors
    ///
    /// [`NotAvailable`] naming the build's best level.
    pub fn require(self) -> Result<Self, NotAvailable> {
        if self.compiled() {
            Ok(self)
        } else {
            Err(NotAvailable {
                asked: self,
                best: best(),
            })
        }
    }

    /// Whether this machine's CPU has the level's instruction sets, whatever this build has
    /// (a build for `x86-64-v3` runs on an AVX-512 machine, say): what a native build of
    /// llama.cpp would use there.
    pub fn on_this_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            match self {
                Level::Scalar => true,
                Level::Avx2 => avx2,
                Level::Avx2Vnni => avx2 && has!("avxvnni"),
                Level::Avx512 => {
                    avx2 && has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512vl")
                        && has!("avx512vnni")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Level::Scalar
        }
    }

    fn from_index(i: u8) -> Self {
        Self::ALL[usize::from(i).min(Self::ALL.len() - 1)]
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A level name that is not one of [`Level::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLevel(pub String);

impl fmt::Display for UnknownLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = Level::ALL.iter().map(|l| l.name()).collect();
        write!(
            f,
            "unknown CPU level {:?}: expected one of {}",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownLevel {}

impl FromStr for Level {
    type Err = UnknownLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownLevel(s.to_string()))
    }
}

/// The highest level this build has.
pub fn best() -> Level {
    Level::ALL
        .into_iter()
        .rev()
        .find(|l| l.compiled())
        .unwrap_or(Level::Scalar)
}

/// The highest level this machine's CPU has ([`Level::on_this_cpu`]), which may be above
/// this build's [`best`].
pub fn machine() -> Level {
    Level::ALL
        .into_iter()
        .rev()
        .find(|l| l.on_this_cpu())
        .unwrap_or(Level::Scalar)
}

/// The levels this build has, from the plainest up.
pub fn available() -> Vec<Level> {
    Level::ALL.into_iter().filter(|l| l.compiled()).collect()
}

/// The cap's index in [`Level::ALL`] (`u8::MAX`: none).
static CAP: AtomicU8 = AtomicU8::new(u8::MAX);

/// A cap above what this build has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAvailable {
    /// The level asked for.
    pub asked: Level,
    /// The build's best.
    pub best: Level,
}

impl fmt::Display for NotAvailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = available().iter().map(|l| l.name()).collect();
        write!(
            f,
            "CPU level {} is not available: this build (compiled for this machine) runs up to {} \
             (levels: {})",
            self.asked,
            self.best,
            names.join(", ")
        )
    }
}

impl std::error::Error for NotAvailable {}

/// Caps the kernels at `level` for the rest of the process (every model in it).
///
/// # Errors
///
/// [`NotAvailable`] when `level` is above what this build has: asking for a level is asking
/// to test it, so running a lower one instead would hide that.
pub fn set_cap(level: Level) -> Result<(), NotAvailable> {
    let level = level.require()?;
    let index = Level::ALL.iter().position(|l| *l == level).unwrap_or(0);
    #[allow(clippy::cast_possible_truncation)] // four levels
    CAP.store(index as u8, Ordering::Relaxed);
    Ok(())
}

/// The level the kernels run at: the build's best, or the cap.
pub fn level() -> Level {
    match CAP.load(Ordering::Relaxed) {
        u8::MAX => best(),
        i => Level::from_index(i).min(best()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_say_what_is_expected() {
        for l in Level::ALL {
            assert_eq!(l.name().parse::<Level>(), Ok(l));
        }
        assert_eq!(" AVX2 ".parse::<Level>(), Ok(Level::Avx2));
        let err = "sse4".parse::<Level>().unwrap_err().to_string();
        assert!(err.contains("scalar, avx2, avx2-vnni, avx512"), "{err}");
    }

    #[test]
    fn the_build_has_scalar_and_its_levels_in_order() {
        let levels = available();
        assert_eq!(levels[0], Level::Scalar);
        assert_eq!(*levels.last().unwrap(), best());
        assert!(levels.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_machine_has_every_level_this_build_runs() {
        // A build only runs on a CPU with its target features, so the CPU has every level
        // the build has (and may have more: a build for x86-64-v3 on an AVX-512 machine).
        for level in available() {
            assert!(level.on_this_cpu(), "{level}");
        }
        assert!(machine() >= best());
        assert!(Level::ALL
            .into_iter()
            .filter(|l| *l <= machine())
            .all(Level::on_this_cpu));
    }

    #[test]
    fn a_level_the_build_lacks_is_refused() {
        if let Some(missing) = Level::ALL.into_iter().find(|l| !l.compiled()) {
            let err = set_cap(missing).unwrap_err();
            assert_eq!(err.best, best());
            assert!(err.to_string().contains("not available"));
        }
    }
}
