/* ojas: the umbrella header. Include this, link -lojas (pkg-config ojas). */
#ifndef OJAS_OJAS_H
#define OJAS_OJAS_H

#include "ojas/core.h"
#include "ojas/ops.h"
#include "ojas/autograd.h"
#include "ojas/io.h"
#include "ojas/gguf.h"
#include "ojas/data.h"
#include "ojas/nn.h"
#include "ojas/optim.h"
#include "ojas/gpt.h"
#include "ojas/infer.h"
#include "ojas/serve.h"
#include "ojas/quant.h"
#include "ojas/train.h"

#endif /* OJAS_OJAS_H */
