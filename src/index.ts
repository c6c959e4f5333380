export default { fetch: () => new Response('ok') };
