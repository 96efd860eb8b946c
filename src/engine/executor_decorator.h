// A hook that wraps the executor an engine builds, before the engine uses it: tests inject faults
// or observe calls through it. Empty: the executor as built.
#pragma once

#include <functional>
#include <memory>

namespace pagoda {

class ModelExecutor;

using ExecutorDecorator = std::function<std::unique_ptr<ModelExecutor>(std::unique_ptr<ModelExecutor>)>;

}  // namespace pagoda
