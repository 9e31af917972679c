-- wrk script for tools/load-test: multi-turn chat completions against a
-- gateway. 64 conversations of 8 turns share a 2 KB system prompt; turn t
-- of a conversation carries its whole history (t questions and answers),
-- so its prompt starts with the previous turn's. Requests cycle through
-- the conversations turn by turn (every conversation's turn 0, then every
-- turn 1, ...), so a router that keeps a conversation on one engine finds
-- its history cached there. Prompts are 0.6K to 1.4K pseudo-tokens.
-- The bodies are built once per wrk thread; request() only picks one.

local conversations, turns = 64, 8
local bodies = {}

local function words(seed, n)
  local out = {}
  local x = seed
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = "w" .. (x % 5000)
  end
  return table.concat(out, " ")
end

local system = "You are a helpful assistant. " .. words(1, 330)

local function message(role, content)
  return '{"role": "' .. role .. '", "content": "' .. content .. '"}'
end

for t = 0, turns - 1 do
  for c = 0, conversations - 1 do
    local msgs = { message("system", system) }
    for k = 0, t do
      msgs[#msgs + 1] = message("user", "Conversation " .. c .. ", question " .. k ..
        ": " .. words(1000 * c + k + 7, 60))
      if k < t then
        msgs[#msgs + 1] = message("assistant", " tok0 tok1")
      end
    end
    bodies[#bodies + 1] = '{"model": "m", "max_tokens": 2, "messages": [' ..
      table.concat(msgs, ", ") .. ']}'
  end
end

local i = 0
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"

request = function()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
