%% @doc The HTTP status page: OTP's `inets' httpd, on the loopback interface only, off
%% unless the application environment asks for it:
%% ```
%% {hypermnesia, [{http_status, #{port => 8484, token => <<"3f9c2a7e51b84d06a1e5c0d9b7f2e418">>}}]}
%% '''
%% `port' 0 picks a free port ({@link url/0} says which). Every request must carry the token,
%% as `?token=...' or `Authorization: Bearer ...'; without it the answer is 401.
%%
%% `GET /status' is a page that shows the cluster as {@link hm_status:cluster_info/0} sees it
%% from this node: the members, which links are up, each EC table's convergence and each
%% copy's lag, updated every second by a script in the page itself (it fetches the JSON; the
%% page loads nothing from anywhere else). The same URL with `?format=json' (or with
%% `Accept: application/json') answers that JSON ({@link hm_json}): the map `cluster_info/0'
%% returns, with `converged', `nodes' and `tables'.
%%
%% `GET /metrics' answers this node's metrics in Prometheus' text exposition format
%% ({@link hm_metrics}), behind the same token.
%%
%% A bad configuration stops the application from starting, with
%% `{bad_http_status, Reason}'. {@link start_page/1} and {@link stop_page/0} start and stop
%% the page on a running node, without touching the rest of the application (its
%% membership counters, last partition and last heal stay as they are). The server runs under `inets' (started if it is not), linked
%% to this module's process: each stops the other.
%%
%% Invariants: the server listens on 127.0.0.1 only; no status is answered without the token.
-module(hm_http).
-behaviour(gen_server).

-export([start_link/0, start_page/1, stop_page/0, url/0, check_config/1, authorized/2, do/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-include_lib("inets/include/httpd.hrl").

-define(STATUS_TIMEOUT_MS, 2000).

%%% ---------------------------------------------------------------- API

%% @doc Start the page if the application environment has `http_status' (`ignore'
%% otherwise).
-spec start_link() -> {ok, pid()} | ignore | {error, term()}.
start_link() ->
    case application:get_env(hypermnesia, http_status) of
        undefined -> ignore;
        {ok, Cfg} ->
            case check_config(Cfg) of
                {ok, C} -> gen_server:start_link({local, ?MODULE}, ?MODULE, C, []);
                {error, Why} -> {error, {bad_http_status, Why}}
            end
    end.

%% @doc Start the page on a running node: with `configured', as the `http_status'
%% application environment says; with a map `#{port, token}' (see {@link check_config/1}),
%% which then becomes that environment (a later {@link start_page/1} with `configured', or a
%% restart of the application, uses it). Returns the page's address, as {@link url/0}.
%% Errors: `{error, not_configured}' (no `http_status' environment), `{error,
%% {bad_http_status, Reason}}' (a bad map, or a port that cannot be opened: the environment
%% is left as it was), `{error, already_started}', `{error, not_running}' (Hypermnesia does
%% not run here).
-spec start_page(configured | term()) -> {ok, string()} | {error, term()}.
start_page(configured) ->
    case application:get_env(hypermnesia, http_status) of
        undefined -> {error, not_configured};
        {ok, Cfg} -> start_page(Cfg)
    end;
start_page(Cfg) ->
    case {check_config(Cfg), whereis(?MODULE)} of
        {{error, Why}, _} -> {error, {bad_http_status, Why}};
        {{ok, _}, Pid} when is_pid(Pid) -> {error, already_started};
        {{ok, _}, undefined} ->
            Before = application:get_env(hypermnesia, http_status),
            ok = application:set_env(hypermnesia, http_status, Cfg),
            case restart_child() of
                {ok, _} -> url();
                {error, running} -> {error, already_started};
                {error, not_running} -> restore_env(Before), {error, not_running};
                {error, Why} -> restore_env(Before), {error, bad_http_status(Why)}
            end
    end.

%% @doc Stop the page (its listener closes); `ok' also when it was not running.
-spec stop_page() -> ok | {error, not_running}.
stop_page() ->
    try supervisor:terminate_child(hypermnesia_sup, ?MODULE) of
        ok -> ok;
        {error, not_found} -> ok
    catch exit:{noproc, _} -> {error, not_running}
    end.

restart_child() ->
    try supervisor:restart_child(hypermnesia_sup, ?MODULE)
    catch exit:{noproc, _} -> {error, not_running}
    end.

restore_env(undefined) -> application:unset_env(hypermnesia, http_status);
restore_env({ok, Cfg}) -> application:set_env(hypermnesia, http_status, Cfg).

bad_http_status({bad_http_status, _} = Why) -> Why;
bad_http_status(Why) -> {bad_http_status, Why}.

%% @doc The page's address, without the token; `{error, not_enabled}' when it is off.
-spec url() -> {ok, string()} | {error, not_enabled}.
url() ->
    try gen_server:call(?MODULE, port) of
        Port -> {ok, "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/status"}
    catch exit:{noproc, _} -> {error, not_enabled}
    end.

%% @doc Check the `http_status' setting: a map with `port' (0..65535) and a non-empty
%% `token' (a binary or a string).
-spec check_config(term()) -> {ok, #{port := inet:port_number(), token := binary()}} |
          {error, term()}.
check_config(#{port := P, token := T} = C) when is_integer(P), P >= 0, P =< 65535 ->
    case maps:keys(maps:without([port, token], C)) of
        [] ->
            case token(T) of
                {ok, B} -> {ok, #{port => P, token => B}};
                error -> {error, {bad_token, T}}
            end;
        [K | _] -> {error, {unknown_key, K}}
    end;
check_config(#{port := P, token := _}) -> {error, {bad_port, P}};
check_config(#{port := _}) -> {error, no_token};
check_config(C) -> {error, {not_a_map_with_port_and_token, C}}.

token(T) when is_list(T) ->
    try token(unicode:characters_to_binary(T)) catch _:_ -> error end;
token(T) when is_binary(T), byte_size(T) > 0 -> {ok, T};
token(_) -> error.

%% @doc Whether a request (its URI and parsed headers, names lower case) carries `Token'.
-spec authorized({string(), [{string(), string()}]}, binary()) -> boolean().
authorized({Uri, Headers}, Token) ->
    Given = case proplists:get_value("authorization", Headers) of
                "Bearer " ++ T -> T;
                _ -> proplists:get_value("token", query(Uri), "")
            end,
    same(unicode:characters_to_binary(Given), Token).

%% Compares every byte whatever differs first (no timing hint to the token).
same(A, B) when byte_size(A) =:= byte_size(B) ->
    lists:foldl(fun({X, Y}, Acc) -> Acc bor (X bxor Y) end, 0,
                lists:zip(binary_to_list(A), binary_to_list(B))) =:= 0;
same(_, _) -> false.

query(Uri) ->
    case string:split(Uri, "?") of
        [_, Q] -> uri_string:dissect_query(Q);
        _ -> []
    end.

%%% ---------------------------------------------------------------- httpd callback

%% @doc httpd's module callback: answers `/status', `/status?format=json' and `/metrics'.
-spec do(#mod{}) -> {proceed, list()}.
do(#mod{method = Method, request_uri = Uri, parsed_header = Headers}) ->
    [Path | _] = string:split(Uri, "?"),
    Token = persistent_term:get({?MODULE, token}, undefined),
    Resp = case {Method, Path} of
               {"GET", "/status"} ->
                   case is_binary(Token) andalso authorized({Uri, Headers}, Token) of
                       false -> respond(401, "text/plain", <<"token required\n">>);
                       true ->
                           case wants_json(Uri, Headers) of
                               true -> respond(200, "application/json", status_json());
                               false -> respond(200, "text/html; charset=utf-8", page())
                           end
                   end;
               {"GET", "/metrics"} ->
                   case is_binary(Token) andalso authorized({Uri, Headers}, Token) of
                       false -> respond(401, "text/plain", <<"token required\n">>);
                       true -> respond(200, "text/plain; version=0.0.4; charset=utf-8",
                                       hm_metrics:scrape())
                   end;
               {"GET", _} -> respond(404, "text/plain", <<"not found\n">>);
               _ -> respond(405, "text/plain", <<"GET only\n">>)
           end,
    {proceed, [{response, Resp}]}.

wants_json(Uri, Headers) ->
    proplists:get_value("format", query(Uri)) =:= "json" orelse
        string:find(proplists:get_value("accept", Headers, ""), "application/json") =/= nomatch.

respond(Code, Type, Body0) ->
    Body = iolist_to_binary(Body0),
    {response, [{code, Code}, {content_type, Type},
                {content_length, integer_to_list(byte_size(Body))},
                {"cache-control", "no-store"}, {"x-content-type-options", "nosniff"},
                {"content-security-policy",
                 "default-src 'none'; script-src 'unsafe-inline'; "
                 "style-src 'unsafe-inline'; connect-src 'self'"}],
     binary_to_list(Body)}.

status_json() ->
    case hm_status:cluster_info(all, #{timeout => ?STATUS_TIMEOUT_MS}) of
        {error, Why} -> hm_json:encode(#{error => iolist_to_binary(io_lib:format("~0p", [Why]))});
        Info -> hm_json:encode(Info#{node => node()})
    end.

%%% ---------------------------------------------------------------- gen_server

-spec init(#{port := inet:port_number(), token := binary()}) -> {ok, map()} | {stop, term()}.
init(#{port := Port, token := Token}) ->
    process_flag(trap_exit, true),
    {ok, _} = application:ensure_all_started(inets),
    Root = code:lib_dir(hypermnesia),
    persistent_term:put({?MODULE, token}, Token),
    case inets:start(httpd, [{port, Port}, {bind_address, {127, 0, 0, 1}}, {ipfamily, inet},
                             {server_name, "hypermnesia"}, {server_root, Root},
                             {document_root, Root}, {modules, [?MODULE]}]) of
        {ok, Pid} ->
            link(Pid),
            [{port, Bound}] = httpd:info(Pid, [port]),
            logger:notice("hypermnesia: status page on http://127.0.0.1:~p/status", [Bound],
                          #{domain => [hypermnesia]}),
            {ok, #{httpd => Pid, port => Bound}};
        {error, Why} ->
            _ = persistent_term:erase({?MODULE, token}),
            {stop, {bad_http_status, Why}}
    end.

-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call(port, _From, S = #{port := P}) -> {reply, P, S};
handle_call(_, _From, S) -> {reply, {error, unknown_request}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.

-spec handle_info(term(), map()) -> {noreply, map()} | {stop, term(), map()}.
handle_info({'EXIT', Pid, Why}, S = #{httpd := Pid}) -> {stop, {httpd_exit, Why}, S};
handle_info(_, S) -> {noreply, S}.

-spec terminate(term(), map()) -> ok.
terminate(_, #{httpd := Pid}) ->
    _ = persistent_term:erase({?MODULE, token}),
    _ = try inets:stop(httpd, Pid) catch _:_ -> ok end,
    ok.

%%% ---------------------------------------------------------------- the page

page() ->
    <<"<!DOCTYPE html>
<html><head><meta charset=\"utf-8\"><title>Hypermnesia status</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #bbb;padding:.2em .6em;text-align:left}
.yes,.up,.ready{background:#d8f5d0}.no,.down{background:#f8d0d0}.unknown{background:#eee}
#err{color:#a00}
</style></head>
<body>
<h1>Hypermnesia: <span id=\"converged\" class=\"unknown\">loading</span></h1>
<p>Seen from <span id=\"node\">?</span>, updated <span id=\"updated\">never</span>
(<span id=\"polls\">0</span> updates). <span id=\"err\"></span></p>
<h2>Nodes</h2><table id=\"nodes\"></table>
<h2>Links</h2><table id=\"links\"></table>
<h2>Tables</h2><div id=\"tables\"></div>
<noscript>This page updates itself with JavaScript; the same URL with
<code>format=json</code> gives the JSON.</noscript>
<script>
var q = new URLSearchParams(location.search), polls = 0;
function esc(s){return String(s).replace(/[&<>\"]/g,function(c){
  return {'&':'&amp;','<':'&lt;','>':'&gt;','\"':'&quot;'}[c];});}
function cell(v, cls){return '<td'+(cls?' class=\"'+cls+'\"':'')+'>'+esc(v)+'</td>';}
function row(cells){return '<tr>'+cells.join('')+'</tr>';}
function render(s){
  var c = document.getElementById('converged');
  c.textContent = s.converged ? 'converged' : 'not converged';
  c.className = s.converged ? 'yes' : 'no';
  document.getElementById('node').textContent = s.node;
  var names = Object.keys(s.nodes).sort(), h = [];
  h.push(row(['<th>node</th><th>status</th><th>partitions seen</th><th>Mnesia re-joins</th>',
              '<th>last heal</th>']));
  names.forEach(function(n){
    var v = s.nodes[n], lh = v.last_heal;
    h.push('<tr data-node=\"'+esc(n)+'\">'+cell(n)+cell(v.status, v.status=='up'?'up':'down')+
      cell(v.partitions_seen==null?'':v.partitions_seen)+
      cell(v.mnesia_rejoins==null?'':v.mnesia_rejoins)+
      cell(lh ? lh.table+' with '+lh.peer+': '+lh.duration_ms+' ms, '+
           lh.ops_received+' ops in, '+lh.ops_sent+' ops out' : '')+'</tr>');
  });
  document.getElementById('nodes').innerHTML = h.join('');
  var l = [row(['<th></th>'].concat(names.map(function(n){return '<th>'+esc(n)+'</th>';})))];
  names.forEach(function(a){
    var v = s.nodes[a], cs = [cell(a)];
    names.forEach(function(b){
      if (a == b) cs.push(cell('-'));
      else if (!v.connected) cs.push(cell('?', 'unknown'));
      else { var up = v.connected.indexOf(b) >= 0;
             cs.push('<td class=\"'+(up?'up':'down')+'\" data-link=\"'+esc(a+' '+b)+'\">'+
                     (up?'up':'down')+'</td>'); }
    });
    l.push(row(cs));
  });
  document.getElementById('links').innerHTML = l.join('');
  var t = [];
  Object.keys(s.tables).sort().forEach(function(tab){
    var v = s.tables[tab];
    t.push('<h3>'+esc(tab)+': <span class=\"'+(v.converged?'yes':'no')+'\" data-table=\"'+
           esc(tab)+'\">'+(v.converged?'converged':'not converged')+'</span></h3>');
    if (v.pending.length) t.push('<p>pending: '+esc(JSON.stringify(v.pending))+'</p>');
    t.push('<table>'+row(['<th>copy</th><th>status</th><th>rows</th><th>lag</th>',
      '<th>stability lag</th><th>buffered</th><th>unstable</th><th>queued</th><th>digest</th>']));
    Object.keys(v.copies).sort().forEach(function(n){
      var k = v.copies[n], d = function(x){return x==null?'':x;};
      t.push('<tr data-copy=\"'+esc(tab+' '+n)+'\">'+cell(n)+
        cell(k.status, k.status=='ready'?'ready':'down')+cell(d(k.size))+cell(d(k.lag))+
        cell(d(k.stability_lag))+cell(d(k.buffered_ops))+cell(d(k.unstable_ops))+
        cell(d(k.queued_ops))+cell(k.digest?k.digest.substring(0,12):'')+'</tr>');
    });
    t.push('</table>');
  });
  document.getElementById('tables').innerHTML = t.join('');
  document.getElementById('updated').textContent = new Date().toISOString();
  document.getElementById('polls').textContent = ++polls;
}
function poll(){
  fetch('status?format=json&token='+encodeURIComponent(q.get('token')||''),
        {cache:'no-store'})
    .then(function(r){if(!r.ok) throw new Error('HTTP '+r.status); return r.json();})
    .then(function(s){
      if (s.error) throw new Error(s.error);
      document.getElementById('err').textContent=''; render(s);})
    .catch(function(e){document.getElementById('err').textContent=String(e);})
    .finally(function(){setTimeout(poll, 1000);});
}
poll();
</script>
</body></html>
">>.
