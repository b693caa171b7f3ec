#pragma once
/// \file swarmflow.hpp
/// Everything an application or a stage needs.

#include <swarmflow/envelope.hpp>
#include <swarmflow/params.hpp>
#include <swarmflow/plugin.hpp>
#include <swarmflow/registry.hpp>
#include <swarmflow/report.hpp>
#include <swarmflow/runtime.hpp>
#include <swarmflow/stage.hpp>
#include <swarmflow/status.hpp>
#include <swarmflow/version.hpp>
