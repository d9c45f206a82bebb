// A real OpenID provider for the console's sign-in tests: `oidc-provider` (OpenID Certified),
// with one client (the console), three people and their groups, and its development login and
// consent pages. Usage: node provider.mjs PORT REDIRECT_URI
//
// For the refusal tests, one fault at a time can be armed with GET /__fault/NAME: the next
// token answer's ID token is replaced by one that fails one check — "forged" (signed with
// another key under the provider's key id), "expired", "audience" (for another client) or
// "nonce" (another sign-in's) — each otherwise exactly the provider's own token, signed with its
// own key where the fault is not the signature. This stands in for an attacker or a broken
// provider; the console must refuse each.
import Provider from "oidc-provider";
import * as jose from "jose";

const [port, redirect] = [Number(process.argv[2]), process.argv[3]];
if (!port || !redirect) {
  console.error("usage: node provider.mjs PORT REDIRECT_URI");
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await jose.exportJWK(privateKey)), kid: "provider-key", alg: "RS256", use: "sig" };
const { privateKey: otherKey } = await jose.generateKeyPair("RS256");

const people = {
  ana: { sub: "ana-0001", email: "ana@example.com", groups: ["acme-payments"] },
  bo: { sub: "bo-0002", email: "bo@example.com", groups: ["staff", "acme-payments"] },
  eve: { sub: "eve-0003", email: "eve@example.com", groups: ["globex-ops"] },
  mal: { sub: "mal-0004", email: "mal@example.com", groups: ["staff"] },
};

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: "oncebox-console",
      client_secret: "console-secret",
      redirect_uris: [redirect],
      grant_types: ["authorization_code"],
      response_types: ["code"],
    },
  ],
  jwks: { keys: [jwk] },
  pkce: { required: () => true, methods: ["S256"] },
  scopes: ["openid", "email", "groups"],
  claims: { email: ["email"], groups: ["groups"] },
  // Scope claims in the ID token itself, as providers configured to send groups do.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, id) {
    const person = people[id];
    if (!person) return undefined;
    return { accountId: id, claims: async () => ({ ...person }) };
  },
});
provider.proxy = false;

let fault = null;
provider.use(async (ctx, next) => {
  const armed = ctx.path.match(/^\/__fault\/(forged|expired|audience|nonce)$/);
  if (armed) {
    fault = armed[1];
    ctx.status = 204;
    return;
  }
  await next();
  if (ctx.path !== "/token" || fault === null || ctx.status !== 200) return;
  const body = typeof ctx.body === "string" ? JSON.parse(ctx.body) : ctx.body;
  if (!body || typeof body.id_token !== "string") return;
  const claims = jose.decodeJwt(body.id_token);
  const now = Math.floor(Date.now() / 1000);
  let key = privateKey;
  if (fault === "forged") key = otherKey;
  if (fault === "expired") Object.assign(claims, { iat: now - 7200, exp: now - 3600 });
  if (fault === "audience") claims.aud = "another-client";
  if (fault === "nonce") claims.nonce = "another-sign-in";
  body.id_token = await new jose.SignJWT(claims)
    .setProtectedHeader({ alg: "RS256", kid: "provider-key", typ: "JWT" })
    .sign(key);
  ctx.body = body;
  fault = null;
});

provider.listen(port, "127.0.0.1", () => {
  console.log(`oidc-provider ${issuer} ready`);
});
