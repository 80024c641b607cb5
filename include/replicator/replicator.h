/*
 * replicator/replicator.h - the whole public API. Include this one header.
 */
#ifndef REPLICATOR_H
#define REPLICATOR_H

#include "api.h"
#include "core.h"
#include "kernels.h"
#include "tensor.h"
#include "nn.h"
#include "optim.h"
#include "data.h"
#include "io.h"
#include "onnx.h"
#include "trace.h"
#include "tensorboard.h"
#include "gif.h"
#include "loader.h"
#include "comm.h"
#include "options.h"
#include "runtime.h"
#include "plan.h"
#include "ps.h"
#include "trainer.h"
#include "model.h"
#include "bench.h"
#include "env.h"
#include "replay.h"
#include "render.h"

#define RP_VERSION "0.1.0"

#endif
