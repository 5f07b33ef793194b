//! `--models-preset FILE`: models served on demand, each with settings of its own. wick's form
//! is TOML:
//!
//! ```toml
//! [defaults]                 # every model's, unless it sets its own
//! ctx-size = 8192
//!
//! [models.coder]             # served as `coder`
//! model = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M"   # any model reference
//! aliases = ["qwen-coder"]
//! parallel = 2
//! keep-alive = "1h"
//! pin = true
//! ```
//!
//! llama-server's INI preset (`[name]` sections of its flags without the dashes, `[*]` for
//! every model) is read too where its keys have a counterpart; the others are listed in a
//! warning, not silently dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use wick_server::KeepAlive;

/// `gpu-layers`: a number, or `all` / `auto` as a string.
fn gpu_layers<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<wick::GpuLayers>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Layers {
        Count(u32),
        Word(String),
    }
    match Layers::deserialize(deserializer)? {
        Layers::Count(n) => Ok(Some(wick::GpuLayers::Count(n))),
        Layers::Word(word) => word.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

/// A KV cache type, from its name (`f16`, `q8_0`, …).
fn cache_type<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<wick::CacheType>, D::Error> {
    String::deserialize(deserializer)?
        .parse()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// One model's settings; every field left out falls back to `[defaults]`, then to `wick
/// serve`'s flags.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Preset {
    /// The model: any reference `-m` takes (a file, a URL, `owner/repo[:QUANT]`, a store name).
    pub(crate) model: Option<String>,
    /// Other names it answers to.
    pub(crate) aliases: Vec<String>,
    /// Labels listed with it.
    pub(crate) tags: Vec<String>,
    /// Each request's context window, in tokens.
    pub(crate) ctx_size: Option<u32>,
    /// Requests that generate at once.
    pub(crate) parallel: Option<u32>,
    /// A llama.cpp template name or inline Jinja replacing the model's template.
    pub(crate) chat_template: Option<String>,
    /// A draft model for speculative decoding.
    pub(crate) model_draft: Option<String>,
    /// LoRA adapters, `FILE[:SCALE]`.
    pub(crate) lora: Vec<String>,
    /// `deterministic` or `fast`.
    pub(crate) kernels: Option<String>,
    /// The KV cache's type for keys (`f16`, `q8_0`, …).
    #[serde(deserialize_with = "cache_type")]
    pub(crate) cache_type_k: Option<wick::CacheType>,
    /// The KV cache's type for values.
    #[serde(deserialize_with = "cache_type")]
    pub(crate) cache_type_v: Option<wick::CacheType>,
    /// Layers offloaded to a GPU: a number, `all` or `auto`.
    #[serde(deserialize_with = "gpu_layers")]
    pub(crate) gpu_layers: Option<wick::GpuLayers>,
    /// Never unloaded once loaded.
    pub(crate) pin: Option<bool>,
    /// How long it stays loaded once idle (`5m`, `-1`, …).
    pub(crate) keep_alive: Option<String>,
    /// Loaded when the server starts.
    pub(crate) load_on_startup: Option<bool>,
}

impl Preset {
    /// `self`, with what it leaves out taken from `defaults`.
    fn over(self, defaults: &Preset) -> Preset {
        let or_list = |own: Vec<String>, base: &Vec<String>| {
            if own.is_empty() {
                base.clone()
            } else {
                own
            }
        };
        Preset {
            model: self.model.or_else(|| defaults.model.clone()),
            aliases: self.aliases,
            tags: or_list(self.tags, &defaults.tags),
            ctx_size: self.ctx_size.or(defaults.ctx_size),
            parallel: self.parallel.or(defaults.parallel),
            chat_template: self
                .chat_template
                .or_else(|| defaults.chat_template.clone()),
            model_draft: self.model_draft.or_else(|| defaults.model_draft.clone()),
            lora: or_list(self.lora, &defaults.lora),
            kernels: self.kernels.or_else(|| defaults.kernels.clone()),
            cache_type_k: self.cache_type_k.or(defaults.cache_type_k),
            cache_type_v: self.cache_type_v.or(defaults.cache_type_v),
            gpu_layers: self.gpu_layers.or(defaults.gpu_layers),
            pin: self.pin.or(defaults.pin),
            keep_alive: self.keep_alive.or_else(|| defaults.keep_alive.clone()),
            load_on_startup: self.load_on_startup.or(defaults.load_on_startup),
        }
    }

    /// Its keep-alive, parsed.
    pub(crate) fn keep_alive(&self) -> Result<Option<KeepAlive>, String> {
        self.keep_alive.as_deref().map(str::parse).transpose()
    }

    /// Its LoRA adapters, parsed.
    pub(crate) fn loras(&self) -> Result<Vec<(PathBuf, f32)>, String> {
        self.lora.iter().map(|l| super::parse_lora(l)).collect()
    }
}

/// A preset's models, by name, each with its defaults applied; and what was ignored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Presets {
    pub(crate) models: Vec<(String, Preset)>,
    /// INI keys with no counterpart, each `[section] key`.
    pub(crate) ignored: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    #[serde(default)]
    defaults: Preset,
    #[serde(default)]
    models: BTreeMap<String, Preset>,
}

/// Reads the preset at `path`: llama-server's INI form for a `.ini` file, else TOML.
pub(crate) fn read(path: &Path) -> Result<Presets> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --models-preset {}", path.display()))?;
    let ini = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("ini"));
    let parsed = if ini {
        parse_ini(&text)
    } else {
        parse_toml(&text)
    };
    let presets = parsed.map_err(|e| anyhow::anyhow!("--models-preset {}: {e}", path.display()))?;
    for (name, preset) in &presets.models {
        check(name, preset)
            .map_err(|e| anyhow::anyhow!("--models-preset {}: {e}", path.display()))?;
    }
    Ok(presets)
}

fn check(name: &str, preset: &Preset) -> Result<()> {
    if preset.model.as_deref().is_none_or(str::is_empty) {
        bail!("the model `{name}` names no file or reference: give it `model = \"…\"`");
    }
    if let Some(kernels) = &preset.kernels {
        if kernels != "deterministic" && kernels != "fast" {
            bail!("the model `{name}`: kernels is `deterministic` or `fast`, not `{kernels}`");
        }
    }
    if preset.parallel == Some(0) || preset.ctx_size == Some(0) {
        bail!("the model `{name}`: parallel and ctx-size are 1 or more");
    }
    preset
        .keep_alive()
        .map_err(|e| anyhow::anyhow!("the model `{name}`: {e}"))?;
    preset
        .loras()
        .map_err(|e| anyhow::anyhow!("the model `{name}`: lora: {e}"))?;
    Ok(())
}

fn parse_toml(text: &str) -> Result<Presets, String> {
    let file: TomlFile = toml::from_str(text).map_err(|e| e.to_string())?;
    Ok(Presets {
        models: file
            .models
            .into_iter()
            .map(|(name, p)| (name, p.over(&file.defaults)))
            .collect(),
        ignored: Vec::new(),
    })
}

/// llama-server's INI preset: `[name]` sections (`[*]`: every model) of `key = value` lines,
/// its flags' long or short names without the dashes; `;` and `#` start comments.
fn parse_ini(text: &str) -> Result<Presets, String> {
    let mut defaults = Preset::default();
    let mut models: Vec<(String, Preset)> = Vec::new();
    let mut hf_files: BTreeMap<String, String> = BTreeMap::new();
    let mut ignored = Vec::new();
    let mut section: Option<String> = None;
    for (number, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_owned();
            if name != "*" && !models.iter().any(|(n, _)| *n == name) {
                models.push((name.clone(), Preset::default()));
            }
            section = Some(name);
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!(
                "line {}: `{line}` is not `key = value`",
                number + 1
            ));
        };
        let Some(name) = section.as_deref() else {
            return Err(format!(
                "line {}: `{line}` is outside a [section]",
                number + 1
            ));
        };
        let key = key.trim().trim_start_matches('-');
        let value = value.trim().trim_matches('"').to_owned();
        let preset = if name == "*" {
            &mut defaults
        } else {
            &mut models
                .iter_mut()
                .find(|(n, _)| n == name)
                .expect("invariant: every section was added")
                .1
        };
        let number_of = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("line {}: {key} = {v} is not a number", number + 1))
        };
        let cache_type_of = |v: &str| {
            v.parse::<wick::CacheType>()
                .map_err(|e| format!("line {}: {key}: {e}", number + 1))
        };
        let list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        match key {
            "m" | "model" | "hf" | "hfr" | "hf-repo" => preset.model = Some(value),
            "hff" | "hf-file" => {
                hf_files.insert(name.to_owned(), value);
            }
            "a" | "alias" => preset.aliases = list(&value),
            "tags" => preset.tags = list(&value),
            "c" | "ctx-size" => preset.ctx_size = Some(number_of(&value)?),
            "np" | "parallel" => preset.parallel = Some(number_of(&value)?),
            "ngl" | "gpu-layers" | "n-gpu-layers" => {
                let layers = value
                    .parse()
                    .map_err(|e| format!("line {}: {key}: {e}", number + 1))?;
                preset.gpu_layers = Some(layers);
            }
            "chat-template" => preset.chat_template = Some(value),
            "ctk" | "cache-type-k" => preset.cache_type_k = Some(cache_type_of(&value)?),
            "ctv" | "cache-type-v" => preset.cache_type_v = Some(cache_type_of(&value)?),
            "md" | "model-draft" => preset.model_draft = Some(value),
            "lora" => preset.lora = list(&value),
            "load-on-startup" => preset.load_on_startup = Some(truthy(&value)),
            "pin" => preset.pin = Some(truthy(&value)),
            "keep-alive" => preset.keep_alive = Some(value),
            _ => ignored.push(format!("[{name}] {key}")),
        }
    }
    // `hf-repo` with `hf-file`: that file of the repository.
    for (name, file) in hf_files {
        if let Some((_, preset)) = models.iter_mut().find(|(n, _)| *n == name) {
            if let Some(repo) = preset.model.take() {
                let repo = repo.split(':').next().unwrap_or(&repo).to_owned();
                preset.model = Some(format!("hf:{repo}/{file}"));
            }
        }
    }
    Ok(Presets {
        models: models
            .into_iter()
            .map(|(name, p)| (name, p.over(&defaults)))
            .collect(),
        ignored,
    })
}

fn truthy(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_preset_gives_each_model_its_settings_over_the_defaults() {
        let presets = parse_toml(
            r#"
            [defaults]
            ctx-size = 8192
            tags = ["local"]

            [models.coder]
            model = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q4_K_M"
            aliases = ["qwen-coder"]
            parallel = 2
            keep-alive = "1h"
            pin = true
            gpu-layers = "auto"

            [models.small]
            model = "/models/small.gguf"
            ctx-size = 2048
            lora = ["adapter.gguf:0.5"]
            gpu-layers = 12
            "#,
        )
        .unwrap();
        assert_eq!(presets.models.len(), 2);
        let (name, coder) = &presets.models[0];
        assert_eq!(name, "coder");
        assert_eq!(coder.ctx_size, Some(8192));
        assert_eq!(coder.parallel, Some(2));
        assert_eq!(coder.pin, Some(true));
        assert_eq!(coder.gpu_layers, Some(wick::GpuLayers::AUTO));
        assert_eq!(coder.tags, ["local"]);
        assert_eq!(
            coder.keep_alive(),
            Ok(Some(KeepAlive::For(std::time::Duration::from_secs(3600))))
        );
        let (_, small) = &presets.models[1];
        assert_eq!(small.ctx_size, Some(2048));
        assert_eq!(small.gpu_layers, Some(wick::GpuLayers::Count(12)));
        let error = parse_toml("[models.a]\nmodel = \"x\"\ngpu-layers = \"most\"\n").unwrap_err();
        assert!(error.contains("most"), "{error}");
        assert_eq!(
            small.loras(),
            Ok(vec![(PathBuf::from("adapter.gguf"), 0.5)])
        );
    }

    #[test]
    fn a_toml_preset_with_an_unknown_key_is_refused_with_its_name() {
        let error = parse_toml("[models.a]\nmodel = \"x\"\ncontext = 5\n").unwrap_err();
        assert!(error.contains("context"), "{error}");
    }

    #[test]
    fn llama_servers_ini_preset_maps_its_flags_and_lists_the_ignored_ones() {
        let presets = parse_ini(
            "; llama-server preset\n\
             [*]\n\
             c = 4096\n\
             flash-attn = on\n\
             [model-a]\n\
             hf-repo = ggml-org/test-model-stories260K\n\
             [model-b]\n\
             hf-repo = ggml-org/tinygemma3-GGUF:Q8_0\n\
             hf-file = tinygemma3-Q8_0.gguf\n\
             alias = b1, b2\n\
             n-gpu-layers = 99\n\
             ctk = q8_0\n\
             cache-type-v = q4_0\n\
             load-on-startup = true\n",
        )
        .unwrap();
        let names: Vec<&str> = presets.models.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["model-a", "model-b"]);
        let a = &presets.models[0].1;
        assert_eq!(a.model.as_deref(), Some("ggml-org/test-model-stories260K"));
        assert_eq!(a.ctx_size, Some(4096));
        let b = &presets.models[1].1;
        assert_eq!(
            b.model.as_deref(),
            Some("hf:ggml-org/tinygemma3-GGUF/tinygemma3-Q8_0.gguf")
        );
        assert_eq!(b.aliases, ["b1", "b2"]);
        assert_eq!(b.gpu_layers, Some(wick::GpuLayers::Count(99)));
        assert_eq!(b.load_on_startup, Some(true));
        assert_eq!(
            (b.cache_type_k, b.cache_type_v),
            (Some(wick::CacheType::Q8_0), Some(wick::CacheType::Q4_0))
        );
        assert_eq!(presets.ignored, ["[*] flash-attn"]);
        assert!(parse_ini("c = 1\n")
            .unwrap_err()
            .contains("outside a [section]"));
        assert!(parse_ini("[a]\nc = lots\n")
            .unwrap_err()
            .contains("not a number"));
    }

    #[test]
    fn a_model_without_a_reference_or_with_bad_values_is_refused() {
        assert!(check("a", &Preset::default()).is_err());
        let bad = Preset {
            model: Some("x.gguf".into()),
            kernels: Some("quick".into()),
            ..Preset::default()
        };
        assert!(check("a", &bad).unwrap_err().to_string().contains("quick"));
        // A cache type is typed when the file is read: an unknown one is refused there.
        let err =
            parse_toml("[models.a]\nmodel = \"x.gguf\"\ncache-type-v = \"q3_k\"\n").unwrap_err();
        assert!(err.contains("not a KV cache type"), "{err}");
        let err = parse_ini("[a]\nm = x.gguf\nctk = q3_k\n").unwrap_err();
        assert!(
            err.contains("line 3: ctk") && err.contains("not a KV cache type"),
            "{err}"
        );
        let bad = Preset {
            model: Some("x.gguf".into()),
            keep_alive: Some("soon".into()),
            ..Preset::default()
        };
        assert!(check("a", &bad).is_err());
    }
}
