%% @doc Sessions over mergeable types on real nodes (after "Banyan: Coordination-free
%% Distributed Transactions over Mergeable Types", sections 3 and 4): three `peer' nodes of
%% test/hm_cluster.erl (names `mrdt1_...' to `mrdt3_...'), one repository with a copy on each.
%%
%% <ul>
%% <li>`atomic_visibility': writes of one session are invisible to another until published;
%% then a refresh shows all of them; pending writes survive a refresh, merged.</li>
%% <li>`partition_publish_heal': a real partition (nodes 1, 2 | 3); sessions publish
%% increments, set adds, log appends and build-cache hits on both sides; heal; after a
%% refresh every node reads the same values: the counter is the sum of every published
%% increment.</li>
%% <li>`gc_bounded': a steady workload of publishes on every node with collection: the table
%% stays bounded while history grows, and the values are intact.</li>
%% <li>`gc_linked_log': a steady workload of linked-log appends on every node with
%% collection: after each round every copy holds exactly the log values its public branch's
%% log reaches (the log's content) and a bounded number of other records, and the log reads
%% whole.</li>
%% <li>`errors': documented errors for an unknown repository, bad types and values, a closed
%% session, bad repository options.</li>
%% </ul>
-module(hm_mrdt_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([atomic_visibility/1, partition_publish_heal/1, gc_bounded/1, gc_linked_log/1, errors/1]).
-export([incr/3, read_fresh/2, publish_many/3, append_many/4, log_storage/2]).

suite() -> [{timetrap, {minutes, 3}}].

all() -> [atomic_visibility, partition_publish_heal, gc_bounded, gc_linked_log, errors].

init_per_suite(Config) ->
    C = hm_cluster:start(#{nodes => 3, prefix => "sessk", modules => [?MODULE, hm_sim_mrdt],
                           app_env => [{max_backoff_ms, 500}, {mrdt_interval_ms, 200}],
                           log_filter => {mrdt_netsplit, {fun hm_cluster:netsplit_filter/2, []}}}),
    [{cluster, C} | Config].

end_per_suite(Config) ->
    hm_cluster:stop(?config(cluster, Config)).

init_per_testcase(Case, Config) ->
    C = ?config(cluster, Config),
    ok = hm_cluster:call(C, 1, hm_session, create_repo,
                         [Case, [{nodes, hm_cluster:nodes(C)}, {storage, ram_copies}]]),
    [{repo, Case} | Config].

%% A case that failed while the cluster was cut must not leave the cut to the next one.
end_per_testcase(Case, Config) ->
    C = ?config(cluster, Config),
    ok = hm_cluster:heal(C),
    _ = hm_cluster:call(C, 1, hm_session, delete_repo, [Case]),
    ok.

%%% ------------------------------------------------------------------ helpers (run on nodes)

%% One session: read the counter, add N, publish, close.
-spec incr(atom(), term(), integer()) -> ok.
incr(Repo, Key, N) ->
    {ok, S} = hm_session:connect(Repo),
    Old = case hm_session:read(S, Key) of
              {ok, V} -> V;
              not_found -> 0
          end,
    ok = hm_session:write(S, Key, hm_mrdt_counter, Old + N),
    ok = hm_session:publish(S),
    ok = hm_session:close(S).

%% A fresh session's reads (connect refreshes).
-spec read_fresh(atom(), [term()]) -> [term()].
read_fresh(Repo, Keys) ->
    {ok, S} = hm_session:connect(Repo),
    R = [hm_session:read(S, K) || K <- Keys],
    ok = hm_session:close(S),
    R.

%% One session publishing N increments of key k, refreshing before each.
-spec publish_many(atom(), term(), pos_integer()) -> ok.
publish_many(Repo, Key, N) ->
    {ok, S} = hm_session:connect(Repo),
    lists:foreach(fun(I) ->
                          ok = hm_session:refresh(S),
                          Old = case hm_session:read(S, Key) of
                                    {ok, V} -> V;
                                    not_found -> 0
                                end,
                          ok = hm_session:write(S, Key, hm_mrdt_counter, Old + 1),
                          ok = hm_session:write(S, {blob, I rem 10}, hm_mrdt_set, [I]),
                          ok = hm_session:publish(S)
                  end, lists:seq(1, N)),
    ok = hm_session:close(S).

%% One session appending N entries `{Tag, I}' to linked log Key, refreshing before each
%% append (so the nodes' appends merge) and publishing after it.
-spec append_many(atom(), term(), term(), pos_integer()) -> ok.
append_many(Repo, Key, Tag, N) ->
    {ok, S} = hm_session:connect(Repo),
    lists:foreach(fun(I) ->
                          ok = hm_session:refresh(S),
                          ok = hm_session:write(S, Key, hm_mrdt_linked_log, {Tag, I}),
                          ok = hm_session:publish(S)
                  end, lists:seq(1, N)),
    ok = hm_session:close(S).

%% This node's copy: the log values (`{obj, _}' records) it holds, how many of them the log
%% of its public branch's head reaches, and how many other records it holds.
-spec log_storage(atom(), term()) -> #{objects := non_neg_integer(), reached := non_neg_integer(),
                                       other := non_neg_integer()}.
log_storage(Repo, Key) ->
    Tab = hm_mrdt_store:table(Repo),
    St = hm_mrdt_store:store(Tab, hm_mrdt_store:nodes(Repo)),
    Head = maps:get(head, hm_session:info(Repo)),
    {ok, Type, V} = hm_mrdt_commits:read(St, hm_mrdt_commits:tree_of(St, Head), Key),
    Fetch = fun(H) -> hm_mrdt_history:get(St, {obj, H}) end,
    Reached = hm_sim_mrdt:reached(Type, [hm_mrdt:hash(V)], Fetch, #{}),
    Keys = [K || {_, K, _} <- ets:tab2list(Tab)],
    Objs = [H || {obj, H} <- Keys],
    #{objects => length(Objs), reached => length([H || H <- Objs, is_map_key(H, Reached)]),
      other => length(Keys) - length(Objs)}.

same_everywhere(C, Repo, Keys, Expected) ->
    hm_cluster:wait_until(
      fun() ->
              Vs = [hm_cluster:call(C, I, ?MODULE, read_fresh, [Repo, Keys]) || I <- hm_cluster:ids(C)],
              lists:all(fun(V) -> V =:= Expected end, Vs) orelse Vs
      end, 30000).

%%% ------------------------------------------------------------------ cases

atomic_visibility(Config) ->
    C = ?config(cluster, Config),
    Repo = ?config(repo, Config),
    ok = hm_cluster:eval(C, 1, fun() ->
        {ok, A} = hm_session:connect(Repo),
        {ok, B} = hm_session:connect(Repo),
        ok = hm_session:write(A, x, hm_mrdt_counter, 5),
        ok = hm_session:write(A, y, hm_mrdt_set, [b, a]),
        {ok, 5} = hm_session:read(A, x),
        {ok, [a, b]} = hm_session:read(A, y),
        not_found = hm_session:read(B, x),
        ok = hm_session:refresh(B),
        not_found = hm_session:read(B, x),          % not published yet
        ok = hm_session:write(B, x, hm_mrdt_counter, 2),
        ok = hm_session:publish(A),
        not_found = hm_session:read(B, y),           % B has not refreshed
        ok = hm_session:refresh(B),
        {ok, 7} = hm_session:read(B, x),             % its pending +2 merged over A's 5
        {ok, [a, b]} = hm_session:read(B, y),        % both of A's writes at once
        ok = hm_session:close(B),
        ok = hm_session:close(A)
    end),
    ok = same_everywhere(C, Repo, [x, y], [{ok, 7}, {ok, [a, b]}]).

partition_publish_heal(Config) ->
    C = ?config(cluster, Config),
    Repo = ?config(repo, Config),
    ok = hm_cluster:call(C, 1, ?MODULE, incr, [Repo, hits, 1]),
    ok = same_everywhere(C, Repo, [hits], [{ok, 1}]),
    ok = hm_cluster:cut(C, [1, 2], [3]),
    Side = fun(I, N, Elem, Msg) ->
                   ok = hm_cluster:eval(C, I, fun() ->
                       {ok, S} = hm_session:connect(Repo),
                       Old = case hm_session:read(S, hits) of {ok, V} -> V; not_found -> 0 end,
                       ok = hm_session:write(S, hits, hm_mrdt_counter, Old + N),
                       Set = case hm_session:read(S, tags) of {ok, T} -> T; not_found -> [] end,
                       ok = hm_session:write(S, tags, hm_mrdt_set, [Elem | Set]),
                       ok = hm_session:write(S, log, hm_mrdt_linked_log, Msg),
                       Stats = case hm_session:read(S, [lib, stats]) of
                                   {ok, {stats, C0, _, H0}} -> {stats, C0, N, H0 + N};
                                   not_found -> {stats, N, N, N}
                               end,
                       ok = hm_session:write(S, [lib, stats], hm_mrdt_build_cache, Stats),
                       ok = hm_session:close(S)
                   end)
           end,
    ok = Side(1, 10, a, {1, from_1}),
    ok = Side(2, 20, b, {2, from_2}),
    ok = Side(3, 300, c, {3, from_3}),
    ok = Side(3, 4000, d, {4, from_3_again}),
    %% each side sees only its own publishes (node 2's reach node 1 asynchronously)
    ok = hm_cluster:wait_until(
           fun() ->
                   R = hm_cluster:call(C, 1, ?MODULE, read_fresh, [Repo, [hits]]),
                   R =:= [{ok, 31}] orelse R
           end, 30000),
    [{ok, 4301}] = hm_cluster:call(C, 3, ?MODULE, read_fresh, [Repo, [hits]]),
    ok = hm_cluster:heal(C),
    ok = same_everywhere(C, Repo, [hits, tags, log],
                         [{ok, 4331}, {ok, [a, b, c, d]},
                          {ok, [{4, from_3_again}, {3, from_3}, {2, from_2}, {1, from_1}]}]),
    %% the build cache's statistics merged to the earliest creation, the latest access, the
    %% sum of the hits
    [{ok, {stats, 10, 4000, 4330}}] = hm_cluster:call(C, 2, ?MODULE, read_fresh,
                                                      [Repo, [[lib, stats]]]),
    %% every node's public branch converged to the same commit
    ok = hm_cluster:wait_until(
           fun() ->
                   Heads = [maps:get(head, hm_cluster:call(C, I, hm_session, info, [Repo]))
                            || I <- hm_cluster:ids(C)],
                   length(lists:usort(Heads)) =:= 1 orelse Heads
           end, 30000).

gc_bounded(Config) ->
    C = ?config(cluster, Config),
    Repo = ?config(repo, Config),
    Rounds = 4,
    Sizes = [begin
                 Pids = [spawn_monitor(fun() ->
                             ok = hm_cluster:call(C, I, ?MODULE, publish_many, [Repo, k, 25])
                         end) || I <- hm_cluster:ids(C)],
                 [receive {'DOWN', Ref, _, _, normal} -> ok end || {_, Ref} <- Pids],
                 %% once the public branches converged (remote refreshes run every 200 ms),
                 %% collection on every node until nothing is left to delete, and every
                 %% copy received every deletion: the copies are the same size
                 ok = settle(C, Repo),
                 Size = fun() -> [maps:get(records, maps:get(table, hm_cluster:call(C, I, hm_session, info, [Repo])))
                                  || I <- hm_cluster:ids(C)] end,
                 hd(Size())
             end || _ <- lists:seq(1, Rounds)],
    ct:pal("table records after each round of 75 publishes: ~p", [Sizes]),
    %% 300 publishes of 2 keys; without collection each leaves >= 4 records
    ?assert(lists:max(Sizes) < 150),
    ?assert(lists:last(Sizes) =< 2 * hd(Sizes) + 20),
    ok = same_everywhere(C, Repo, [k], [{ok, 3 * 25 * Rounds}]).

gc_linked_log(Config) ->
    C = ?config(cluster, Config),
    Repo = ?config(repo, Config),
    Rounds = 4,
    Per = 20,
    Stats = [begin
                 Pids = [spawn_monitor(fun() ->
                             ok = hm_cluster:call(C, I, ?MODULE, append_many,
                                                  [Repo, log, {R, I}, Per])
                         end) || I <- hm_cluster:ids(C)],
                 [receive {'DOWN', Ref, _, _, normal} -> ok end || {_, Ref} <- Pids],
                 settle(C, Repo),
                 [hm_cluster:call(C, I, ?MODULE, log_storage, [Repo, log]) || I <- hm_cluster:ids(C)]
             end || R <- lists:seq(1, Rounds)],
    ct:pal("log storage on each node after each round of ~p appends: ~p", [3 * Per, Stats]),
    lists:foreach(
      fun(#{objects := O, reached := Rd, other := Other}) ->
              %% every log value kept is one the log reaches: no garbage objects
              ?assertEqual(O, Rd),
              %% and the rest (branch records, floors, a graft, the head's commit and the
              %% commits whose packs it shares, cached merges) does not grow with the log
              ?assert(Other =< 16)
      end, lists:append(Stats)),
    %% the log's content: one value per append and the merge values
    [#{reached := Last} | _] = lists:last(Stats),
    ?assert(Last >= 3 * Per * Rounds),
    Entries = hm_cluster:eval(C, 1, fun() ->
        {ok, S} = hm_session:connect(Repo),
        {ok, L} = hm_session:read(S, log),
        ok = hm_session:close(S),
        L
    end),
    ?assertEqual(3 * Per * Rounds, length(Entries)).

%% The public branches converged, then collection on every node until nothing is left to
%% delete, and every copy received every deletion.
settle(C, Repo) ->
    ok = hm_cluster:wait_until(
           fun() ->
                   Heads = [maps:get(head, hm_cluster:call(C, I, hm_session, info, [Repo]))
                            || I <- hm_cluster:ids(C)],
                   length(lists:usort(Heads)) =:= 1 orelse Heads
           end, 30000),
    ok = hm_cluster:wait_until(
           fun() ->
                   Rs = [hm_cluster:call(C, I, hm_session, gc, [Repo]) || I <- hm_cluster:ids(C)],
                   lists:all(fun(#{deleted := 0}) -> true; (_) -> false end, Rs) orelse Rs
           end, 30000),
    Size = fun() -> [maps:get(table, hm_cluster:call(C, I, hm_session, info, [Repo]))
                     || I <- hm_cluster:ids(C)] end,
    ok = hm_cluster:wait_until(fun() -> length(lists:usort([R || #{records := R} <- Size()])) =:= 1 end,
                               30000).

errors(Config) ->
    C = ?config(cluster, Config),
    Repo = ?config(repo, Config),
    ok = hm_cluster:eval(C, 2, fun() ->
        {error, {no_such_repo, nope}} = hm_session:connect(nope),
        {error, {already_exists, Repo}} = hm_session:create_repo(Repo, [{nodes, [node()]}]),
        {error, {bad_option, {storage, tape}}} = hm_session:create_repo(other, [{storage, tape}]),
        {ok, S} = hm_session:connect(Repo),
        {error, {bad_type, lists_}} = hm_session:write(S, k, lists_, 1),
        {error, {bad_value, hm_mrdt_counter, x}} = hm_session:write(S, k, hm_mrdt_counter, x),
        ok = hm_session:write(S, k, hm_mrdt_counter, 1),
        {error, {type_mismatch, k, hm_mrdt_counter}} = hm_session:write(S, k, hm_mrdt_set, []),
        ok = hm_session:close(S),
        {error, closed} = hm_session:read(S, k),
        {error, closed} = hm_session:publish(S),
        ok
    end).
