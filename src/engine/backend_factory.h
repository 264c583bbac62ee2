// How the diagnostics get a backend without knowing the backends: a BackendFactory (make_backend of
// src/backends/make_backend.h, passed in by the CLI or a test), and the EngineOptions a RunConfig
// asks for (the per-layer toggles and faults). The engine and the diagnostics never include a
// concrete backend.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/run_config.h"
#include "model/config.h"

namespace degen {

using BackendFactory = std::function<std::unique_ptr<Backend>(const RunConfig&, const ModelConfig&)>;
EngineOptions engine_options(const RunConfig& rc);

}  // namespace degen
