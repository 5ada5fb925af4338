// A deployed-style agent for the controller tests: it only knows OPENAI_BASE_URL / OPENAI_API_KEY
// (plus REINS_TASK for its input and REINS_REWARD_URL to report how it did). It asks the model,
// runs the tool the model calls, sends the result back, and posts its own reward.
import OpenAI from "openai"

const task = JSON.parse(process.env.REINS_TASK)
const client = new OpenAI({ maxRetries: 0 })
const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }]
const messages = [{ role: "user", content: task.question }]

const first = await client.chat.completions.create({ model: "fake-model", messages, tools })
const call = first.choices[0].message.tool_calls?.[0]
if (call === undefined) throw new Error("expected a tool call")
messages.push(first.choices[0].message)
messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify({ city: JSON.parse(call.function.arguments).city, sky: "clear" }) })
const second = await client.chat.completions.create({ model: "fake-model", messages, tools })
console.log(second.choices[0].message.content)

const res = await fetch(process.env.REINS_REWARD_URL, {
  method: "POST",
  headers: { authorization: `Bearer ${process.env.OPENAI_API_KEY}`, "content-type": "application/json" },
  body: JSON.stringify({ reward: task.reward })
})
if (!res.ok) throw new Error(`reward: ${res.status} ${await res.text()}`)
