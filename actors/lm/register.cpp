#include "lm/lm.hpp"
#include "lm/lm_stages.hpp"

namespace swarmflow {

void register_lm_stages(Registry& registry) {
  registry.add<lm::PromptSource>("lm.prompts", "generation requests from a file of prompts");
  registry.add<lm::Tokenize>("lm.tokenize", "text of a request to token ids");
  registry.add<lm::Generate>("lm.generate", "generates a token stream per request, batched per step");
  registry.add<lm::Detokenize>("lm.detokenize", "a request's token stream to its text");
}

}  // namespace swarmflow
