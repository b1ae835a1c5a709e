//! `scripts/preflight.sh`, the check `scripts/test.sh` and `.ci/run` start with, on this
//! machine with other CPUs' flags (`SYSTEMONE_CPU_FLAGS` replaces `/proc/cpuinfo`'s for the
//! preflight only): a CPU with AVX2 and no AVX-512 still runs vLLM, on its AVX2 kernels; a
//! CPU without AVX2 gets vLLM's tests, and only they, named as not run with the flag.
//! llama-server comes prebuilt where the CPU has what the wheel was built for, and is built
//! for the CPU's own instruction sets where it does not.

use std::process::{Command, Output};

/// Runs the preflight in `mode` with `flags` as the CPU's.
fn preflight(mode: &str, flags: &str) -> Output {
    Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/preflight.sh"))
        .arg(mode)
        .env("SYSTEMONE_CPU_FLAGS", flags)
        .env_remove("SYSTEMONE_PREFLIGHT_SHOWN")
        .env_remove("SYSTEMONE_LLAMA")
        .output()
        .expect("scripts/preflight.sh runs")
}

/// The `NAME=value` lines the preflight prints for `eval`.
fn value<'a>(stdout: &'a str, name: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

/// An AVX2 CPU without AVX-512 runs vLLM on its AVX2 kernels (vLLM's tests are skipped only
/// for memory or disk, never for the CPU) and llama-server from the prebuilt wheel.
#[test]
fn an_avx2_cpu_without_avx512_runs_vllm_on_its_avx2_kernels() {
    let out = preflight("test", "fpu sse4_2 avx avx2 fma f16c bmi1 bmi2");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("preflight: llama-server") && l.contains("prebuilt")),
        "{stderr}"
    );
    assert_eq!(
        value(&stdout, "SYSTEMONE_VLLM_KERNELS"),
        Some("avx2"),
        "{stdout}"
    );
    let vllm = stderr
        .lines()
        .find(|l| l.starts_with("preflight: vLLM"))
        .unwrap_or_else(|| panic!("no vLLM line:\n{stderr}"));
    if value(&stdout, "SYSTEMONE_VLLM_RUN") == Some("1") {
        assert!(vllm.contains("AVX2 kernels"), "{vllm}");
        assert_eq!(value(&stdout, "SYSTEMONE_NOT_RUN"), Some("''"), "{stdout}");
    } else {
        assert!(
            vllm.contains("memory") || vllm.contains("disk"),
            "vLLM not run on an AVX2 CPU for another reason than memory or disk: {vllm}"
        );
    }
}

/// A CPU without AVX2: vLLM's tests, and only they, are named as not run with the flag;
/// llama-server runs on a build for the CPU's own instruction sets.
#[test]
fn a_cpu_without_avx2_leaves_out_only_vllms_tests_naming_the_flag() {
    let out = preflight("test", "fpu sse4_2 avx");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(value(&stdout, "SYSTEMONE_VLLM_RUN"), Some("0"), "{stdout}");
    assert_eq!(
        value(&stdout, "SYSTEMONE_NOT_RUN"),
        Some(r"vllm_real::\ vllm_cache_salt::\ vllm_traces::"),
        "{stdout}"
    );
    let why = value(&stdout, "SYSTEMONE_NOT_RUN_WHY").unwrap_or_default();
    assert!(why.contains("avx2"), "{why}");
    assert!(
        stderr.lines().any(|l| l.starts_with("preflight: vLLM")
            && l.contains("NOT RUN")
            && l.contains("avx2")
            && l.contains("vllm_real, vllm_cache_salt, vllm_traces")),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("preflight: llama-server") && l.contains("without avx2")),
        "{stderr}"
    );
}

/// Every requirement gets exactly one line, in every mode that checks it.
#[test]
fn each_requirement_is_checked_once_with_one_line() {
    let out = preflight("ci", "avx2 fma f16c bmi2 avx512f avx512_bf16");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for name in [
        "cpu",
        "memory",
        "disk",
        "toolchain",
        "llama-server",
        "vLLM",
        "redis",
        "postgresql",
        "chromium",
        "sdks",
        "tokenizers",
    ] {
        let lines = stderr
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(name))
            .count();
        assert_eq!(lines, 1, "{name}:\n{stderr}");
    }
}

/// Asking for the prebuilt llama-server on a CPU it was not built for stops the preflight,
/// naming the flags the CPU lacks, before anything is installed.
#[test]
fn the_prebuilt_server_on_a_cpu_without_its_flags_stops_naming_them() {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/preflight.sh"))
        .arg("local")
        .env("SYSTEMONE_CPU_FLAGS", "fpu sse4_2 avx avx2 fma")
        .env("SYSTEMONE_LLAMA", "prebuilt")
        .env_remove("SYSTEMONE_PREFLIGHT_SHOWN")
        .output()
        .expect("scripts/preflight.sh runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("SYSTEMONE_LLAMA=prebuilt") && last.contains("lacks f16c bmi2"),
        "{stderr}"
    );
}
