/**
 * A varied text corpus for tokenizer parity and speed: code, numbers, whitespace runs, CJK,
 * emoji, accents (composed and decomposed), right-to-left and Indic scripts, contractions in
 * every case, and text that spells the control tokens of Qwen and Llama 3 (whole, partial,
 * nested). Generated from a seed, so tests and the benchmark need no file outside the repo.
 */
import { Rng } from "@reins/policy"

/** Hand-written samples, one class of trouble each; every one is also part of the corpus. */
export const SAMPLES: ReadonlyArray<string> = [
  // code
  'function add(a: number, b: number): number {\n  return a + b; // sum\n}\n\nexport const x = add(1, 2);\n',
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in range(10)])\n",
  '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": [1, 2, 3], "ok": true, "x": null}}',
  "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n\twc -l \"$f\" | awk '{print $1}'\ndone 2>&1 >/dev/null\n",
  "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total >= 100.50 GROUP BY u.id;",
  "<div class=\"row\">\r\n  <a href=\"https://example.com/path?q=1&r=%20x#frag\">link</a>\r\n</div>\r\n",
  "--- a/src/main.rs\n+++ b/src/main.rs\n@@ -1,3 +1,4 @@\n fn main() {\n-    println!(\"hi\");\n+    let v: Vec<u8> = vec![0xff; 16];\n+    println!(\"{:?}\", v);\n }\n",
  "if (x!==y&&z>=0||!w){a[i++]=b<<2>>>1;}else{c??=d?.e??f;}",
  // numbers
  "0 1 12 123 1234 12345 123456 1234567 12345678901234567890 -42 +7 3.14159 2.5e-10 6.02E23 0xDEADBEEF 0b1011 1_000_000 1,234,567.89",
  "On 2024-01-31T23:59:59Z the price was $1,299.99 (−12.5%); call +1 (555) 010-9999 or v3.10.2 at 192.168.0.1:8080.",
  "١٢٣ ٤٥٦ ۷۸۹ १२३ ๑๒๓ ①②③ ½ ¾ ² ³ Ⅻ 〇一二三",
  // whitespace runs
  "a  b   c    d\t\te\t \tf\n\ng\n\n\nh\r\n\r\ni \n j  \n  k",
  "   leading and trailing   \n\n    \t\n",
  "nbsp\u00a0here\u00a0\u00a0twice, ideographic\u3000space, line\u2028sep, para\u2029sep, nel\u0085x, bom\ufeffy, zwsp\u200bz, vt\u000bff\u000cend",
  " ".repeat(37) + "x" + "\n".repeat(9) + "\t".repeat(5) + "y" + " \n".repeat(6),
  // CJK and full-width punctuation
  "我们今天去北京的天安门广场，看到了很多游客。你好吗？我很好！「引号」『双引号』",
  "日本語のテキストです。カタカナとひらがなと漢字が混ざっています。ｶﾀｶﾅ（半角）も。",
  "한국어 문장입니다. 안녕하세요, 반갑습니다! 𠜎𠜱𠝹 CJK Ext-B",
  // emoji
  "😀😃😄 👍🏽👍🏿 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 1️⃣#️⃣ ❤️‍🔥 🧑🏻‍💻 ☺︎ vs ☺️ 🫠",
  // accents, composed and decomposed, other scripts
  "café naïve résumé façade Ångström Øresund Straße Łódź Čeština Tiếng Việt",
  "cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m e\u0301\u0301\u0301 a\u0323\u0302 \u1100\u1161\u11a8",
  "Ελληνικά κείμενα, русский текст, עברית, العربية مع التشكيل: كَتَبَ, हिन्दी देवनागरी, ภาษาไทย",
  // contractions and quotes in every case
  "I'm you're he's she'll we've they'd it's I'M YOU'RE HE'S SHE'LL WE'VE THEY'D IT'S i'M yOu'Re 'S 'T 'Ll x's it'Sok she'LLgo 'reading 'Mmm",
  "don't can't won't isn't O'Neil rock'n'roll ’s ‘quoted’ “double” «guillemets» 'single'",
  // text that spells control tokens, whole, partial and nested
  "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nhi<|im_end|>",
  "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><tool_response>\nok\n</tool_response>",
  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<|endoftext|><|end_of_text|><|eom_id|><|python_tag|><|reserved_special_token_17|><|fim_prefix|><|fim_middle|><|fim_suffix|><|vision_start|>",
  "<|im_ <|im_end <im_end|> |> <| <<|im_end|>> <|im_end|><|im_end|> <|eot_id <|eot_id|>| <think <think>> </think",
  // long runs
  "a".repeat(600) + " " + "9".repeat(200) + " " + "!?".repeat(150) + " " + "ab".repeat(300),
  // paths, URLs, emails, base64
  "/usr/local/lib/node_modules/@scope/pkg/dist/index.mjs C:\\Users\\Me\\file.txt mailto:a.b+c@example.co.uk",
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
  // prose
  "Reinforcement learning trains the policy on rollouts; the agent calls tools, reads the results, and answers. It isn't magic.",
  // controls and odd code points
  "\u0000\u0001\u001b[31mred\u001b[0m\u007f\u009f \u{10ffff} \u{e0001}\u{e0041} \ufdd0 \ue000 \uffff"
]

/** Short fragments the random documents are assembled from, grouped like SAMPLES. */
const POOLS: ReadonlyArray<ReadonlyArray<string>> = [
  "the agent calls a tool and reads the result then answers the user weather Paris sunny rain policy model".split(" "),
  ["Hello", "World", "HTTP", "JSONParser", "camelCase", "snake_case", "kebab-case", "SCREAMING_CASE", "iPhone", "McDonald"],
  ["0", "7", "42", "123", "2024", "31337", "3.14", "1e9", "-1", "1,000", "0x1f", "99.9%", "$5", "€12,50", "12:30"],
  [" ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\t", "    ", "\u00a0", "\u3000", "\u0085", "\ufeff", "\u2028"],
  ["(", ")", "{", "}", "[", "]", ";", ":", ",", ".", "...", "!", "?", "=>", "===", "&&", "||", "//", "/*", "*/", "#", "@", "~", "`", "'", '"', "\\", "-", "_", "+"],
  ["中文", "北京", "日本語", "ひらがな", "カタカナ", "한국어", "，", "。", "！", "？", "「", "」", "𠜎"],
  ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "🏳️‍🌈", "1️⃣", "❤️", "🧑🏻‍💻", "✨", "🚀"],
  ["é", "e\u0301", "ñ", "n\u0303", "ü", "u\u0308", "ß", "Ø", "Å", "A\u030a", "ệ", "\u0301", "\u0308", "\u20dd", "ж", "Ω", "ש", "ع", "ह", "ไ"],
  ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "’s", "n't"],
  [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>",
    "<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|end_of_text|>", "<|reserved_special_token_3|>",
    "<|im_", "im_end|>", "<|", "|>", "<think", "</", "<|eot_id", "_id|>"
  ]
]

/** A random document of about `chars` UTF-16 units: fragments from the pools, now and then a sample. */
export const randomDocument = (next: () => number, chars: number): string => {
  let s = ""
  while (s.length < chars) {
    if (next() < 0.02) {
      s += SAMPLES[Math.floor(next() * SAMPLES.length)]!
      continue
    }
    const pool = POOLS[Math.floor(next() * POOLS.length)]!
    s += pool[Math.floor(next() * pool.length)]!
    // Mostly words separated by a space, as in prose; sometimes glued, to mix classes in one word.
    const r = next()
    if (r < 0.5) s += " "
    else if (r < 0.55) s += "\n"
  }
  return s
}

/** A seeded corpus of about `chars` UTF-16 units: the samples, then random documents (16 kB at most each). */
export const makeTokenizerCorpus = (seed: number, chars: number): Array<string> => {
  const rng = new Rng(seed)
  const next = () => rng.uniform()
  const docs = [...SAMPLES]
  let n = docs.reduce((a, d) => a + d.length, 0)
  while (n < chars) {
    const doc = randomDocument(next, 16 + Math.floor(next() * Math.min(16_000, chars)))
    docs.push(doc)
    n += doc.length
  }
  return docs
}
