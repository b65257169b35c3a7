%% @doc Three hosts on TLS distribution, as the guide's quick start ("On several hosts") sets
%% them up. Each node runs in a network namespace of its own ({@link hm_cluster}, option
%% `network => netns'): its own address on a bridge (`10.77.0.I'), its own `epmd', a long
%% node name (`-name hosts1_<pid>@10.77.0.1'). Distribution runs over TLS (`-proto_dist
%% inet_tls'), with certificates the suite makes with `openssl' ({@link hm_tls}): a test
%% CA, and for each node a certificate of its own signed by it and naming its address; every
%% node verifies its peer (`verify_peer' against the CA, `fail_if_no_peer_cert' on the
%% server side). A client without a certificate is refused too.
%% <ul>
%% <li>`distribution_is_tls_and_verified': every connection between the nodes runs on TLS;
%% a client whose certificate another CA signed is refused by a node, and a client that
%% trusts only that other CA refuses the node's certificate.</li>
%% <li>`tables_through_partition_and_heal': an EC table, a partitioned table and a CRDT
%% table written before a cut, on both sides of a silent cut (every packet between node 3
%% and the others dropped) once the nodes noticed it, then healed: every copy converges to
%% every write, and the connections made again are TLS.</li>
%% </ul>
%% Skipped where network namespaces cannot be made (Linux, root and iproute2 are needed) or
%% `openssl' is not installed.
-module(hm_hosts_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("kernel/include/net_address.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1]).
-export([distribution_is_tls_and_verified/1, tables_through_partition_and_heal/1]).
-export([tls_peers/0, try_tls/3, rows/1, counters/2]).

-define(NODES, 3).
-define(TICKTIME, "8").

suite() -> [{timetrap, {minutes, 4}}].

all() -> [distribution_is_tls_and_verified, tables_through_partition_and_heal].

init_per_suite(Config) ->
    Dir = filename:join(?config(priv_dir, Config), "tls"),
    case {hm_cluster:netns_available(), hm_tls:available()} of
        {false, _} -> {skip, "network namespaces cannot be made here (needs Linux, root and "
                       "iproute2)"};
        {true, false} -> {skip, "openssl is not installed: it makes the test's certificates"};
        {true, true} ->
            ok = make_certificates(Dir),
            C = hm_cluster:start(#{nodes => ?NODES, dir => ?config(priv_dir, Config),
                                   prefix => "hosts", modules => [?MODULE], network => netns,
                                   args => ["-kernel", "net_ticktime", ?TICKTIME],
                                   node_args => fun(I) -> hm_tls:dist_args(optfile(Dir, I))
                                                end,
                                   log_filter => {netsplit, {fun hm_cluster:netsplit_filter/2,
                                                             ["not responding", "TLS"]}}}),
            [{cluster, C}, {tls_dir, Dir} | Config]
    end.

end_per_suite(Config) -> hm_cluster:stop(?config(cluster, Config)).

%%% ------------------------------------------------------------- cases

distribution_is_tls_and_verified(Config) ->
    C = ?config(cluster, Config),
    Dir = ?config(tls_dir, Config),
    %% every node reaches the two others, each connection on TLS
    [[] = hm_cluster:call(C, I, ?MODULE, tls_peers, []) -- other_nodes(C, I)
     || I <- hm_cluster:ids(C)],
    [[] = other_nodes(C, I) -- hm_cluster:call(C, I, ?MODULE, tls_peers, [])
     || I <- hm_cluster:ids(C)],
    %% node 2's distribution port, as node 1's epmd client finds it
    Node2 = hm_cluster:node(C, 2),
    [Name, Host] = string:split(atom_to_list(Node2), "@"),
    {ok, Ip} = inet:parse_address(Host),
    {port, Port, _} = hm_cluster:call(C, 1, erl_epmd, port_please, [Name, Ip]),
    Ours = [{cacertfile, file(Dir, "ca.pem")}, {verify, verify_peer}],
    %% the test CA's certificate of node 1, in the way nodes use it: accepted
    ok = hm_cluster:call(C, 1, ?MODULE, try_tls,
                         [Ip, Port, [{certfile, file(Dir, "node1.pem")},
                                     {keyfile, file(Dir, "node1.key")} | Ours]]),
    %% a certificate for the same address from another CA: node 2 refuses it
    R1 = hm_cluster:call(C, 1, ?MODULE, try_tls,
                         [Ip, Port, [{certfile, file(Dir, "rogue.pem")},
                                     {keyfile, file(Dir, "rogue.key")} | Ours]]),
    %% no certificate at all: refused too
    R2 = hm_cluster:call(C, 1, ?MODULE, try_tls, [Ip, Port, Ours]),
    %% a client that trusts only the other CA refuses node 2's certificate
    R3 = hm_cluster:call(C, 1, ?MODULE, try_tls,
                                   [Ip, Port, [{certfile, file(Dir, "rogue.pem")},
                                               {keyfile, file(Dir, "rogue.key")},
                                               {cacertfile, file(Dir, "rogue-ca.pem")},
                                               {verify, verify_peer}]]),
    ct:pal("refusals: ~p", [[R1, R2, R3]]),
    [{refused, unknown_ca}, {refused, handshake_failure}, {refused, unknown_ca}] = [R1, R2, R3],
    ok.

tables_through_partition_and_heal(Config) ->
    C = ?config(cluster, Config),
    Nodes = hm_cluster:nodes(C),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [ec, [{ec, pawset}, {attributes, [k, v]},
                                         {ram_copies, Nodes}]]),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [part, [{ec, pawset}, {attributes, [k, v]},
                                           {frag_properties, [{n_fragments, 4},
                                                              {n_ram_copies, 2},
                                                              {node_pool, Nodes}]}]]),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [cnt, [{crdt, pncounter}, {flavor, delta},
                                          {ram_copies, Nodes}]]),
    [ok = hm_cluster:call(C, I, mnesia, wait_for_tables, [[ec, cnt], 30000])
     || I <- hm_cluster:ids(C)],
    ok = write(C, 1, before, 20),
    %% silent: packets dropped, connections up until the tick time runs out
    ok = hm_cluster:cut(C, [3], [1, 2]),
    ok = hm_cluster:wait_until(fun() -> disconnected(C) end, 30000),
    [ok = write(C, I, cut, 20) || I <- hm_cluster:ids(C)],
    ok = hm_cluster:heal(C),
    Expected = lists:sort([{before, 1, K} || K <- lists:seq(1, 20)] ++
                              [{cut, I, K} || I <- hm_cluster:ids(C), K <- lists:seq(1, 20)]),
    %% before: +20 on node 1; during the cut each node adds 20 and takes 1 away
    Counts = #{total => 20 + ?NODES * 19},
    ok = hm_cluster:wait_until(
           fun() ->
                   Seen = [{I, hm_cluster:call(C, I, ?MODULE, rows, [ec]),
                            hm_cluster:call(C, I, ?MODULE, rows, [part]),
                            hm_cluster:call(C, I, ?MODULE, counters, [cnt, [total]])}
                           || I <- hm_cluster:ids(C)],
                   lists:all(fun({_, E, P, N}) ->
                                     E =:= Expected andalso P =:= Expected andalso N =:= Counts
                             end, Seen) orelse [{I, length(E), length(P), N}
                                                || {I, E, P, N} <- Seen]
           end, 60000),
    ok = hm_cluster:wait_until(
           fun() -> [] =:= [I || I <- hm_cluster:ids(C),
                                 hm_cluster:call(C, I, ?MODULE, tls_peers, []) =/=
                                     other_nodes(C, I)]
           end, 30000),
    {comment, "EC, partitioned and CRDT tables converged after a silent cut, on TLS"}.

%%% ------------------------------------------------------------- helpers

%% Node I writes `N' rows keyed `{Tag, I, K}' to the EC and the partitioned table, and adds
%% N - 1 to the counter (N increments, one decrement; N only before the cut).
write(C, I, Tag, N) ->
    Keys = [{Tag, I, K} || K <- lists:seq(1, N)],
    ok = hm_cluster:call(C, I, hypermnesia, async_ec,
                         [fun() -> lists:foreach(fun(Key) ->
                                                         ok = mnesia:write({ec, Key, I}),
                                                         ok = mnesia:write({part, Key, I})
                                                 end, Keys)
                          end, []]),
    [ok = hm_cluster:call(C, I, hypermnesia, increment, [cnt, total]) || _ <- Keys],
    case Tag of
        before -> ok;
        _ -> ok = hm_cluster:call(C, I, hypermnesia, decrement, [cnt, total])
    end.

other_nodes(C, I) -> lists:sort(hm_cluster:nodes(C) -- [hm_cluster:node(C, I)]).

%% Node 3 and nodes 1 and 2 no longer see each other connected.
disconnected(C) ->
    N3 = hm_cluster:node(C, 3),
    not lists:member(N3, hm_cluster:call(C, 1, erlang, nodes, []))
        andalso not lists:member(N3, hm_cluster:call(C, 2, erlang, nodes, []))
        andalso [] =:= hm_cluster:call(C, 3, erlang, nodes, []) -- [N3].

file(Dir, Name) -> hm_tls:file(Dir, Name).

optfile(Dir, I) -> file(Dir, "ssl_dist_node" ++ integer_to_list(I) ++ ".conf").

%% A test CA, for each node a key and a certificate it signed naming the node's address, and
%% each node's distribution option file (the guide's quick start shows the same); and a
%% second CA with a certificate for node 1's address, which the nodes must refuse.
make_certificates(Dir) ->
    ok = hm_tls:ca(Dir, "ca"),
    ok = hm_tls:ca(Dir, "rogue-ca"),
    lists:foreach(fun(I) ->
                          Name = "node" ++ integer_to_list(I),
                          ok = hm_tls:certificate(Dir, Name, "ca", hm_cluster:netns_address(I)),
                          _ = hm_tls:optfile(Dir, Name, "ca")
                  end, lists:seq(1, ?NODES)),
    hm_tls:certificate(Dir, "rogue", "rogue-ca", hm_cluster:netns_address(1)).

%%% ------------------------------------------------------------- on the nodes

%% The nodes this node is connected to over TLS distribution, sorted.
tls_peers() ->
    lists:sort([N || N <- nodes(),
                     {ok, #net_address{protocol = tls}} <- [net_kernel:node_info(N, address)]]).

%% Open a TLS connection to `Ip':`Port' (a node's distribution port) with `Opts' and say
%% whether both sides accepted it: `ok', or `{refused, Alert}' (the TLS alert's name). With TLS 1.3 the client's handshake ends before the
%% server has checked the client's certificate: a refusal then arrives as an alert on the
%% first read, so the client waits for the server's answer to a byte of nonsense (the
%% distribution handshake closes the connection on it) or for its alert.
try_tls(Ip, Port, Opts) ->
    _ = application:ensure_all_started(ssl),
    case ssl:connect(Ip, Port, [binary, {active, false}, {packet, 2} | Opts], 5000) of
        {ok, S} ->
            ok = ssl:send(S, <<"?">>),
            R = ssl:recv(S, 0, 5000),
            _ = ssl:close(S),
            case R of
                {error, {tls_alert, {Alert, _}}} -> {refused, Alert};
                _ -> ok
            end;
        {error, {tls_alert, {Alert, _}}} -> {refused, Alert};
        {error, Reason} -> {refused, Reason}
    end.

%% The rows of `Tab' as this node shows them, sorted by key: `{Key...}' without the value.
rows(Tab) ->
    lists:sort([K || {_, K, _} <- hypermnesia:async_ec(
                                    fun() -> mnesia:select(Tab, [{'_', [], ['$_']}]) end)]).

counters(Tab, Keys) -> maps:from_list([{K, hypermnesia:get_counter(Tab, K)} || K <- Keys]).
