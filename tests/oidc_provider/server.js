// A real OpenID Connect provider (panva's oidc-provider) for the single sign-on tests.
//
// Environment: OIDC_PORT (the port on 127.0.0.1), OIDC_CLIENT_ID, OIDC_CLIENT_SECRET,
// OIDC_REDIRECT_URIS (comma list), OIDC_ACCOUNTS (JSON: login -> claims). Its own login and
// consent pages are oidc-provider's development interactions: any password signs in the login.
//
// A test may ask for one ID token the provider would never issue: POST /test/next-id-token with
// a JSON body {"aud": "...", "exp": seconds from now, "stranger_key": true} makes the next token
// response carry an ID token with those claims changed, signed again with the provider's own key
// (or, with stranger_key, with a key the provider does not publish, under the same key id).
// Everything else the provider answers is its own.

import { exportJWK, generateKeyPair, decodeJwt, decodeProtectedHeader, SignJWT } from 'jose';
import Provider from 'oidc-provider';

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS || '{}');
const KID = 'signing-key';

async function rsaKey() {
  const pair = await generateKeyPair('RS256', { extractable: true });
  const jwk = { ...(await exportJWK(pair.privateKey)), kid: KID, alg: 'RS256', use: 'sig' };
  return { privateKey: pair.privateKey, jwk };
}

const signing = await rsaKey();
const stranger = await rsaKey();
let nextIdToken = null;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.OIDC_CLIENT_ID,
      client_secret: process.env.OIDC_CLIENT_SECRET,
      redirect_uris: process.env.OIDC_REDIRECT_URIS.split(','),
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_post',
    },
  ],
  jwks: { keys: [signing.jwk] },
  cookies: { keys: ['oidc-provider-test-cookie-key'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const claims = accounts[id];
    if (!claims) return undefined;
    return { accountId: id, async claims() { return { sub: id, ...claims }; } };
  },
});

provider.use(async (ctx, next) => {
  if (ctx.path === '/test/next-id-token' && ctx.method === 'POST') {
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    nextIdToken = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    ctx.status = 204;
    return;
  }
  await next();
  if (ctx.oidc?.route === 'token' && ctx.status === 200 && nextIdToken && ctx.body?.id_token) {
    const change = nextIdToken;
    nextIdToken = null;
    const claims = decodeJwt(ctx.body.id_token);
    if (change.aud !== undefined) claims.aud = change.aud;
    if (change.exp !== undefined) {
      claims.exp = Math.floor(Date.now() / 1000) + change.exp;
      claims.iat = Math.min(claims.iat, claims.exp - 60);
    }
    const key = change.stranger_key ? stranger.privateKey : signing.privateKey;
    const header = decodeProtectedHeader(ctx.body.id_token);
    ctx.body = { ...ctx.body, id_token: await new SignJWT(claims).setProtectedHeader(header).sign(key) };
  }
});

provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening ${issuer}\n`);
});
