%% @doc PropEr properties of mergeable types and their history (after "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types", sections 2.1, 4.3, 4.4).
%%
%% <ul>
%% <li>`prop_merge_laws(Type)': for every shipped type, versions derived from a common LCA
%% by the type's own updates: merging with the LCA is the identity, and merge is commutative
%% in its two versions.</li>
%% <li>`prop_replay(counter | set)': random histories of three branches (commits of
%% increments, or of adds of fresh elements and removes of visible ones, and merges of one
%% branch into another, which make criss-cross histories), with history collection between
%% steps: the recursive merge of every branch equals the sequential replay of every
%% operation (the sum of the increments; the added elements minus the removed ones), and
%% collection never changes what a branch shows.</li>
%% <li>`prop_replay(log)': the same with appends to a linked log: the merge of every branch
%% reads every entry appended, and collection (which deletes the log values only collected
%% commits reach) never changes what a branch's log reads.</li>
%% </ul>
-module(hm_mrdt_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([map_store/1, apply_writes/2, apply_plan/2, value/3]).

-define(TYPES, [hm_mrdt_counter, hm_mrdt_set, hm_mrdt_map, hm_mrdt_blob_log,
                hm_mrdt_linked_log, hm_mrdt_queue, hm_mrdt_build_cache]).

merge_laws_test_() ->
    [{atom_to_list(T), {timeout, 60, ?_assert(hm_crdt_prop:check(prop_merge_laws(T)))}}
     || T <- ?TYPES].

replay_test_() ->
    [{atom_to_list(K), {timeout, 120, ?_assert(hm_crdt_prop:check(prop_replay(K)))}}
     || K <- [counter, set, log]].

%%% ------------------------------------------------------------------ merge laws

prop_merge_laws(Type) ->
    ?SAFE_FORALL({L, A, B}, versions(Type),
                 begin
                     LA = if L =:= none -> none; true -> L end,
                     Id1 = LA =:= none orelse Type:merge(LA, LA, B) =:= {ok, B},
                     Id2 = LA =:= none orelse Type:merge(LA, A, LA) =:= {ok, A},
                     Comm = Type:merge(LA, A, B) =:= Type:merge(LA, B, A),
                     ?WHENFAIL(io:format("~p: L=~p A=~p B=~p~n~p~n~p~n",
                                         [Type, L, A, B, Type:merge(LA, A, B),
                                          Type:merge(LA, B, A)]),
                               Id1 andalso Id2 andalso Comm)
                 end).

versions(hm_mrdt_counter) ->
    ?LET(L, oneof([none, integer()]),
         {L, ?LET(D, integer(), base0(L) + D), ?LET(D, integer(), base0(L) + D)});
versions(hm_mrdt_set) ->
    ?LET(L, set(), {L, edit_set(L), edit_set(L)});
versions(hm_mrdt_map) ->
    ?LET(L, map_value(), {L, edit_map(L), edit_map(L)});
versions(hm_mrdt_blob_log) ->
    ?LET(L, list(entry()), {L, ?LET(N, list(entry()), lists:reverse(lists:sort(N)) ++ L),
                            ?LET(N, list(entry()), lists:reverse(lists:sort(N)) ++ L)});
versions(hm_mrdt_linked_log) ->
    ?LET(L, ?LET(Es, list(entry()), appends(empty, Es)),
         {L, ?LET(Es, list(entry()), appends(L, Es)), ?LET(Es, list(entry()), appends(L, Es))});
versions(hm_mrdt_queue) ->
    ?LET(L, list(small()), {L, edit_queue(L), edit_queue(L)});
versions(hm_mrdt_build_cache) ->
    oneof([?LET(Bin, binary(2), {oneof([none, {artefact, Bin}]), {artefact, Bin}, {artefact, Bin}}),
           ?LET({C, T, H}, {nat(), nat(), nat()},
                {{stats, C, T, H}, stats_after(C, T, H), stats_after(C, T, H)})]).

base0(none) -> 0;
base0(N) -> N.

small() -> range(1, 6).
entry() -> {range(1, 20), small()}.
set() -> ?LET(L, list(small()), ordsets:from_list(L)).

edit_set(L) ->
    ?LET({Add, Del}, {list(small()), list(small())},
         ordsets:subtract(ordsets:union(L, ordsets:from_list(Add)), ordsets:from_list(Del))).

map_value() ->
    ?LET(Ks, list({range(1, 4), oneof([counter, set])}),
         maps:from_list([{K, case T of counter -> {hm_mrdt_counter, 0};
                                      set -> {hm_mrdt_set, []} end} || {K, T} <- Ks])).

edit_map(M) ->
    ?LET(Ops, list({range(1, 5), small()}),
         lists:foldl(fun({K, X}, Acc) ->
                             case maps:find(K, Acc) of
                                 {ok, {hm_mrdt_counter, V}} -> Acc#{K => {hm_mrdt_counter, V + X}};
                                 {ok, {hm_mrdt_set, V}} -> Acc#{K => {hm_mrdt_set, ordsets:add_element(X, V)}};
                                 error when X > 4 -> maps:remove(K, Acc);
                                 error -> Acc#{K => {hm_mrdt_counter, X}}
                             end
                     end, M, Ops)).

appends(L, Es) -> lists:foldl(fun(E, Acc) -> hm_mrdt_linked_log:update(Acc, E) end, L, Es).

edit_queue(L) ->
    ?LET({Pop, Push}, {range(0, length(L)), list(small())}, lists:nthtail(Pop, L) ++ Push).

stats_after(C, T, H) ->
    ?LET({DC, DT, DH}, {nat(), nat(), nat()}, {stats, max(0, C - DC), T + DT, H + DH}).

%%% ------------------------------------------------------------------ replay

%% A map-backed store: Fetch over a map held by the caller.
map_store(Map) ->
    MaxGraft = lists:max([-1 | [H || {{graft, _}, H} <- maps:to_list(Map)]]),
    hm_mrdt_history:set_max_graft(
      hm_mrdt_history:store(fun(K) -> case Map of #{K := V} -> {ok, V}; _ -> not_found end end),
      MaxGraft).

apply_writes(Map, St) -> maps:merge(Map, maps:from_list(hm_mrdt_history:writes(St))).

apply_plan(Map, #{graft := G, delete := D}) ->
    maps:without(D, maps:merge(Map, maps:from_list(G))).

%% The value of Key at a commit (none if absent).
value(Map, C, Key) ->
    St = map_store(Map),
    case hm_mrdt_commits:read(St, hm_mrdt_commits:tree_of(St, C), Key) of
        {ok, _, V} -> V;
        not_found -> none
    end.

-define(BRANCHES, 3).

replay_op(counter) ->
    %% keys 1..3 conflict often; keys up to 200 share buckets (64) without conflicting
    frequency([{4, {incr, range(1, ?BRANCHES), oneof([range(1, 3), range(1, 200)]), range(-2, 5)}},
               {3, {merge, range(1, ?BRANCHES), range(1, ?BRANCHES)}},
               {1, gc}]);
replay_op(set) ->
    frequency([{3, {add, range(1, ?BRANCHES)}},
               {2, {remove, range(1, ?BRANCHES), range(1, 8)}},
               {3, {merge, range(1, ?BRANCHES), range(1, ?BRANCHES)}},
               {1, gc}]);
replay_op(log) ->
    frequency([{4, {append, range(1, ?BRANCHES)}},
               {3, {merge, range(1, ?BRANCHES), range(1, ?BRANCHES)}},
               {1, gc}]).

prop_replay(Kind) ->
    ?SAFE_FORALL(Ops, ?LET(N, range(0, 60), vector(N, replay_op(Kind))),
                 begin
                     Heads0 = maps:from_list([{B, none} || B <- lists:seq(1, ?BRANCHES)]),
                     {Map, Heads, Model, Ok} =
                         lists:foldl(fun(Op, Acc) -> step(Kind, Op, Acc) end,
                                     {#{}, Heads0, model0(Kind), true}, Ops),
                     %% merge every branch into branch 1, then 1 into the others
                     {Map1, H1} = lists:foldl(fun(B, {M, H}) -> merge_into(M, maps:get(B, Heads), H) end,
                                              {Map, maps:get(1, Heads)}, lists:seq(2, ?BRANCHES)),
                     Final = final(Kind, Map1, H1),
                     Expected = expected(Kind, Model),
                     ?WHENFAIL(io:format("ops ~p~nfinal ~p~nexpected ~p~n", [Ops, Final, Expected]),
                               Ok andalso Final =:= Expected)
                 end).

model0(counter) -> #{};
model0(set) -> {0, [], []};
model0(log) -> {0, []}.

merge_into(Map, From, To) ->
    St = map_store(Map),
    {ok, M, St1} = hm_mrdt_merge:merge_commits(St, To, From),
    {apply_writes(Map, St1), M}.

commit_writes(Map, Base, Writes, Nonce) ->
    St0 = hm_mrdt_history:set_nonce(map_store(Map), Nonce),
    {T, St1} = hm_mrdt_commits:write_tree(St0, hm_mrdt_commits:tree_of(St0, Base), Writes),
    {C, St2} = hm_mrdt_commits:commit(St1, [B || B <- [Base], B =/= none], T),
    {apply_writes(Map, St2), C}.

step(_, {merge, F, T}, {Map, Heads, Model, Ok}) ->
    {Map1, M} = merge_into(Map, maps:get(F, Heads), maps:get(T, Heads)),
    {Map1, Heads#{T := M}, Model, Ok};
step(_, gc, {Map, Heads, Model, Ok}) ->
    St = map_store(Map),
    Cache = [{Ls, V} || {{cache, Ls}, V} <- maps:to_list(Map)],
    Plan = hm_mrdt_collect:gc_plan(St, maps:values(Heads), Cache),
    Map1 = apply_plan(Map, Plan),
    %% collection changes nothing any branch shows
    Same = lists:all(fun(H) -> snapshot(Map, H) =:= snapshot(Map1, H) andalso
                                   read_log(Map, H) =:= read_log(Map1, H)
                     end, maps:values(Heads)),
    {Map1, Heads, Model, Ok andalso Same};
step(counter, {incr, B, K, N}, {Map, Heads, Model, Ok}) ->
    Base = maps:get(B, Heads),
    Old = case value(Map, Base, K) of none -> 0; V -> V end,
    {Map1, C} = commit_writes(Map, Base, #{K => {hm_mrdt_counter, Old + N}},
                              {incr, erlang:unique_integer()}),
    {Map1, Heads#{B := C}, Model#{K => maps:get(K, Model, 0) + N}, Ok};
step(set, {add, B}, {Map, Heads, {Next, Added, Removed}, Ok}) ->
    Base = maps:get(B, Heads),
    Old = case value(Map, Base, s) of none -> []; V -> V end,
    {Map1, C} = commit_writes(Map, Base, #{s => {hm_mrdt_set, ordsets:add_element(Next, Old)}},
                              {add, Next}),
    {Map1, Heads#{B := C}, {Next + 1, [Next | Added], Removed}, Ok};
step(set, {remove, B, I}, {Map, Heads, {Next, Added, Removed}, Ok}) ->
    Base = maps:get(B, Heads),
    case value(Map, Base, s) of
        Old when is_list(Old), Old =/= [] ->
            E = lists:nth(1 + I rem length(Old), Old),
            {Map1, C} = commit_writes(Map, Base, #{s => {hm_mrdt_set, ordsets:del_element(E, Old)}},
                                      {remove, erlang:unique_integer()}),
            {Map1, Heads#{B := C}, {Next, Added, [E | Removed]}, Ok};
        _ -> {Map, Heads, {Next, Added, Removed}, Ok}
    end;
step(log, {append, B}, {Map, Heads, {Next, Entries}, Ok}) ->
    Base = maps:get(B, Heads),
    L = hm_mrdt_linked_log,
    {Map1, C} = commit_writes(Map, Base, #{log => {L, L:update(value(Map, Base, log), Next)}},
                              {append, Next}),
    {Map1, Heads#{B := C}, {Next + 1, [Next | Entries]}, Ok}.

snapshot(_, none) -> [];
snapshot(Map, C) ->
    St = map_store(Map),
    T = hm_mrdt_commits:tree_of(St, C),
    lists:sort([{K, hm_mrdt_commits:read(St, T, K)} || {K, _} <- hm_mrdt_commits:entries(St, T)]).

final(counter, Map, H) ->
    maps:from_list([{K, V} || {K, {ok, _, V}} <- snapshot(Map, H), V =/= 0]);
final(set, Map, H) ->
    case value(Map, H, s) of none -> []; V -> V end;
final(log, Map, H) -> read_log(Map, H).

%% A branch's linked log as a read shows it: every entry, or `{error, {missing, Hash}}'.
read_log(Map, H) ->
    St = map_store(Map),
    case value(Map, H, log) of
        none -> [];
        V -> hm_mrdt_linked_log:read(V, fun(X) -> hm_mrdt_history:get(St, {obj, X}) end)
    end.

expected(counter, Model) -> maps:filter(fun(_, V) -> V =/= 0 end, Model);
expected(set, {_, Added, Removed}) -> ordsets:subtract(ordsets:from_list(Added), ordsets:from_list(Removed));
expected(log, {_, Entries}) -> lists:reverse(lists:sort(Entries)).
