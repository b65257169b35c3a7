%% @doc PropEr properties of DottedDB replication ({@link hm_dotted}, the DottedDB paper
%% §IV, Algorithms 1–3) and of the Merkle-tree baseline ({@link hm_merkle}, the DottedDB paper
%% §III.A.1), run through EUnit (`PROPER_NUMTESTS' cases each, default 300).
%%
%% The copies of one group run in this process over a message pool: every step delivers,
%% duplicates or drops any message in flight (so any order, loss and duplication), runs a
%% client put or delete with the context of a get, or fires a copy's anti-entropy or strip
%% timer. After the history, a final phase delivers everything and runs anti-entropy between
%% every pair of copies a few times, then strips. Checked against a model that knows only the
%% writes and their contexts:
%% <ul>
%% <li>convergence: every copy shows, per key, exactly the values of the writes no other
%% write's context names (so nothing acknowledged is lost, nothing superseded comes back), in
%% node-clock and in Merkle anti-entropy;</li>
%% <li>no tombstone: after stripping, only keys with a value are stored, no context is left,
%% the dot-key maps are empty;</li>
%% <li>the `show' effects always say what the copy's values are;</li>
%% <li>the context rule: a put with a get's context replaces exactly the versions that get
%% returned; versions that arrived after the get stay as siblings;</li>
%% <li>strip then fill gives back the object (same versions, a context that covers the
%% original);</li>
%% <li>churn at N = 3: copies replaced by new ids (a handoff to the new copy), with loss and
%% duplication; afterwards every stored clock has at most 2 node ids and no context;</li>
%% <li>the Merkle exchange finds exactly the keys whose hashes differ.</li>
%% </ul>
-module(hm_dotted_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_converge/1, prop_context_rule/0, prop_strip_fill/0, prop_churn/0,
         prop_merkle_diff/0]).
-export([new_group/2, run_step/2, settle/1, values/1]).

-define(KEYS, [k1, k2, k3, k4]).
-define(IDS, [a1, a2, a3]).

check(Prop) -> hm_crdt_prop:check(Prop).

dotted_test_() ->
    [{timeout, 300, ?_assert(check(prop_converge(node_clock)))},
     {timeout, 300, ?_assert(check(prop_converge(merkle)))},
     {timeout, 120, ?_assert(check(prop_context_rule()))},
     {timeout, 120, ?_assert(check(prop_strip_fill()))},
     {timeout, 300, ?_assert(check(prop_churn()))},
     {timeout, 120, ?_assert(check(prop_merkle_diff()))}].

%%% ================================================================ the group harness

%% A group: copies by id, messages in flight, every write with its context, what `show' said.
new_group(Ids, AE) ->
    Copies = maps:from_list(
               [{Id, element(1, hm_dotted:new(#{id => Id, peers => Ids, anti_entropy => AE,
                                                 merkle => #{fanout => 4, depth => 2}}))}
                || Id <- Ids]),
    #{copies => Copies, pool => [], writes => #{}, shown => #{}, bad => [], next => 1, ae => AE}.

effects(Id, Effs, G = #{pool := Pool, shown := Sh, bad := Bad}) ->
    Pool1 = Pool ++ [{To, M} || {send, To, M} <- Effs],
    Sh1 = lists:foldl(fun({show, K, []}, A) -> maps:remove({Id, K}, A);
                         ({show, K, Vs}, A) -> A#{{Id, K} => Vs};
                         (_, A) -> A
                      end, Sh, Effs),
    Bad1 = Bad ++ [D || {drop, D} <- Effs, element(1, D) =/= not_a_peer],
    G#{pool := Pool1, shown := Sh1, bad := Bad1}.

copy_ids(#{copies := C}) -> lists:sort(maps:keys(C)).
nth(I, L) -> lists:nth(1 + (I - 1) rem length(L), L).

%% one step of a history
run_step({write, I, Key, What}, G = #{copies := C, writes := W}) ->
    Id = nth(I, copy_ids(G)),
    S = maps:get(Id, C),
    {_, Ctx} = case maps:get(read, G, local) of
                   local -> hm_dotted:get(Key, S);
                   all -> hm_dotted:merge_replies([hm_dotted:fetch(Key, X)
                                                   || X <- maps:values(C)])
               end,
    {Dot, _} = hm_node_clock:next_dot(Id, hm_dotted:node_clock(S)),
    {S1, Effs} = case What of
                     {put, V} -> hm_dotted:put(Key, V, Ctx, S);
                     delete -> hm_dotted:delete(Key, Ctx, S)
                 end,
    {ok, CtxC} = hm_node_clock:decode(Ctx),
    effects(Id, Effs, G#{copies := C#{Id := S1},
                         writes := W#{Dot => {Key, What, hm_node_clock:add(Dot, CtxC)}}});
run_step({deliver, _}, G = #{pool := []}) -> G;
run_step({deliver, N}, G = #{pool := Pool}) ->
    {Pre, [M | Post]} = lists:split((N - 1) rem length(Pool), Pool),
    deliver(M, G#{pool := Pre ++ Post});
run_step({dup, _}, G = #{pool := []}) -> G;
run_step({dup, N}, G = #{pool := Pool}) ->
    deliver(lists:nth(1 + (N - 1) rem length(Pool), Pool), G);
run_step({drop, _}, G = #{pool := []}) -> G;
run_step({drop, N}, G = #{pool := Pool}) ->
    {Pre, [_ | Post]} = lists:split((N - 1) rem length(Pool), Pool),
    G#{pool := Pre ++ Post};
run_step({timer, I, T}, G = #{copies := C}) ->
    Id = nth(I, copy_ids(G)),
    {S1, Effs} = hm_dotted:timeout(T, maps:get(Id, C)),
    effects(Id, Effs, G#{copies := C#{Id := S1}});
run_step({churn, I}, G = #{copies := C, next := Next, ae := AE, shown := Sh}) ->
    %% copy I is replaced by a new id: it is gone, the others take the new group, the new
    %% copy asks one of them for a handoff
    Old = nth(I, copy_ids(G)),
    New = list_to_atom("c" ++ integer_to_list(Next)),
    Peers = [New | copy_ids(G) -- [Old]],
    G1 = lists:foldl(fun(Id, Gx = #{copies := Cx}) ->
                             {S1, Effs} = hm_dotted:set_peers(Peers, maps:get(Id, Cx)),
                             effects(Id, Effs, Gx#{copies := Cx#{Id := S1}})
                     end,
                     G#{copies := maps:remove(Old, C), next := Next + 1,
                        shown := maps:filter(fun({Id, _}, _) -> Id =/= Old end, Sh)},
                     Peers -- [New]),
    {S, Effs} = hm_dotted:new(#{id => New, peers => Peers, bootstrap => true, anti_entropy => AE,
                                merkle => #{fanout => 4, depth => 2}, seed => Next}),
    effects(New, [E || E = {send, _, _} <- Effs], G1#{copies := (maps:get(copies, G1))#{New => S}}).

deliver({To, Msg}, G = #{copies := C}) ->
    case C of
        #{To := S} ->
            {S1, Effs} = hm_dotted:handle(Msg, S),
            effects(To, Effs, G#{copies := C#{To := S1}});
        _ -> G                                          % a copy that is gone
    end.

drain(G = #{pool := []}) -> G;
drain(G) -> drain(run_step({deliver, 1}, G)).

%% The final phase: everything delivered, anti-entropy between every pair (node clock: A sends
%% its clock to B; Merkle: A starts a tree exchange with B), a few rounds, then strip.
settle(G) -> settle(drain(G), 4).

settle(G, 0) ->
    lists:foldl(fun(Id, Gx) -> strip(Id, Gx) end, G, copy_ids(G));
settle(G0, K) ->
    %% a new copy still waiting for its handoff asks again
    G = lists:foldl(fun(Id, Gx = #{copies := C}) ->
                            case hm_dotted:status(maps:get(Id, C)) of
                                syncing -> drain(run_step({timer, index(Id, Gx), anti_entropy},
                                                          Gx));
                                ready -> Gx
                            end
                    end, G0, copy_ids(G0)),
    Pairs = [{A, B} || A <- copy_ids(G), B <- copy_ids(G), A =/= B],
    G1 = lists:foldl(fun({A, B}, Gx = #{copies := C}) ->
                             S = maps:get(A, C),
                             Msg = case hm_dotted:anti_entropy(S) of
                                       node_clock -> {sync_clock, A, hm_dotted:peers(S),
                                                      hm_dotted:node_clock(S)};
                                       merkle -> {merkle, A, hm_dotted:peers(S),
                                                  hm_dotted:node_clock(S),
                                                  hm_merkle:start(hm_dotted:tree(S))}
                                   end,
                             drain(Gx#{pool := [{B, Msg}]})
                     end, G, Pairs),
    settle(lists:foldl(fun(Id, Gx) -> strip(Id, Gx) end, G1, copy_ids(G1)), K - 1).

index(Id, G) -> length(lists:takewhile(fun(X) -> X =/= Id end, copy_ids(G))) + 1.

strip(Id, G = #{copies := C}) ->
    {S1, Effs} = hm_dotted:timeout(strip, maps:get(Id, C)),
    effects(Id, Effs, G#{copies := C#{Id := S1}}).

values(#{copies := C}) -> maps:map(fun(_, S) -> hm_dotted:values(S) end, C).

%% The model: per key, the values of the writes that no other write's context names.
expected(#{writes := W}) ->
    Live = [{Key, Dot, What} || {Dot, {Key, What, _}} <- maps:to_list(W),
                                not lists:any(fun({D2, {K2, _, Ctx}}) ->
                                                      D2 =/= Dot andalso K2 =:= Key andalso
                                                          hm_node_clock:contains(Dot, Ctx)
                                              end, maps:to_list(W))],
    lists:foldl(fun({Key, _, {put, V}}, Acc) -> Acc#{Key => maps:get(Key, Acc, []) ++ [V]};
                   (_, Acc) -> Acc
                end, #{}, lists:sort(fun({_, D1, _}, {_, D2, _}) -> D1 =< D2 end, Live)).

%%% ================================================================ generators

step() -> step([]).

%% a history step; `Extra': more kinds with their weights (churn)
step(Extra) ->
    frequency([{5, {write, range(1, 3), elements(?KEYS),
                    frequency([{3, {put, range(1, 50)}}, {2, delete}])}},
               {6, {deliver, range(1, 20)}},
               {1, {dup, range(1, 20)}},
               {2, {drop, range(1, 20)}},
               {1, {timer, range(1, 3), anti_entropy}},
               {1, {timer, range(1, 3), strip}} | Extra]).

history() -> list(step()).

%%% ================================================================ properties

prop_converge(AE) ->
    ?SAFE_FORALL(H, history(),
        begin
            G = settle(lists:foldl(fun run_step/2, new_group(?IDS, AE), H)),
            Exp = expected(G),
            Vals = values(G),
            Copies = maps:get(copies, G),
            Stored = [{Id, K, O} || {Id, S} <- maps:to_list(Copies),
                                    {K, O} <- maps:to_list(hm_dotted:objects(S))],
            ShownOk = maps:get(shown, G) =:=
                maps:from_list([{{Id, K}, V} || {Id, Vs} <- maps:to_list(Vals),
                                                {K, V} <- maps:to_list(Vs)]),
            ?WHENFAIL(io:format(user, "expected ~p~nvalues ~p~nstored ~p~nbad ~p~n",
                                [Exp, Vals, Stored, maps:get(bad, G)]),
                      lists:all(fun(V) -> V =:= Exp end, maps:values(Vals))
                      %% no tombstone: nothing stored but keys with a value, no context left
                      andalso lists:all(fun({_, K, {_, CC}}) ->
                                                maps:is_key(K, Exp) andalso
                                                    hm_node_clock:is_empty(CC)
                                        end, Stored)
                      andalso lists:all(fun(S) ->
                                                hm_dotted:non_stripped(S) =:= [] andalso
                                                    (AE =:= merkle orelse
                                                     hm_dotted:dot_keys(S) =:= #{})
                                        end, maps:values(Copies))
                      andalso ShownOk
                      andalso maps:get(bad, G) =:= [])
        end).

prop_context_rule() ->
    ?SAFE_FORALL({H, Key, Between},
                 {history(), elements(?KEYS), list(oneof([{deliver, range(1, 20)},
                                                          {write, range(2, 3), elements(?KEYS),
                                                           {put, range(1, 50)}}]))},
        begin
            G0 = lists:foldl(fun run_step/2, new_group(?IDS, node_clock), H),
            S0 = maps:get(a1, maps:get(copies, G0)),
            {_, Ctx} = hm_dotted:get(Key, S0),
            AtGet = dots(Key, S0),
            G1 = lists:foldl(fun run_step/2, G0, Between),
            S1 = maps:get(a1, maps:get(copies, G1)),
            BeforePut = dots(Key, S1),
            {NewDot, _} = hm_node_clock:next_dot(a1, hm_dotted:node_clock(S1)),
            {S2, _} = hm_dotted:put(Key, new, Ctx, S1),
            After = dots(Key, S2),
            Want = lists:sort([NewDot | BeforePut -- AtGet]),
            ?WHENFAIL(io:format(user, "at get ~p~nbefore put ~p~nafter ~p~nwant ~p~n",
                                [AtGet, BeforePut, After, Want]),
                      After =:= Want)
        end).

dots(Key, S) ->
    case maps:get(Key, hm_dotted:objects(S), none) of
        none -> [];
        {Vers, _} -> lists:sort(maps:keys(Vers))
    end.

prop_strip_fill() ->
    ?SAFE_FORALL(H, history(),
        begin
            G = lists:foldl(fun run_step/2, new_group(?IDS, node_clock), H),
            lists:all(fun(S) ->
                              {S1, _} = hm_dotted:timeout(strip, S),
                              lists:all(fun(K) ->
                                                {Vs, C0} = ctx(hm_dotted:fetch(K, S)),
                                                {Vs1, C1} = ctx(hm_dotted:fetch(K, S1)),
                                                Vs =:= Vs1 andalso hm_node_clock:leq(C0, C1)
                                        end, ?KEYS)
                      end, maps:values(maps:get(copies, G)))
        end).

ctx(Reply) ->
    {Vs, C} = hm_dotted:merge_replies([Reply]),
    {ok, Clock} = hm_node_clock:decode(C),
    {Vs, Clock}.

churn_step() -> step([{1, {timer, range(1, 3), anti_entropy}}, {1, {churn, range(1, 3)}}]).

prop_churn() ->
    ?SAFE_FORALL(H, list(churn_step()),
        begin
            G = run_settled((new_group(?IDS, node_clock))#{read => all}, H),
            Copies = maps:get(copies, G),
            Entries = [{Id, K, hm_dotted:clock_entries(K, S)}
                       || {Id, S} <- maps:to_list(Copies), K <- ?KEYS],
            Contexts = [{Id, K} || {Id, S} <- maps:to_list(Copies),
                                   {K, {_, CC}} <- maps:to_list(hm_dotted:objects(S)),
                                   not hm_node_clock:is_empty(CC)],
            Vals = lists:usort(maps:values(values(G))),
            ?WHENFAIL(io:format(user, "entries ~p~ncontexts left ~p~nvalues ~p~nbad ~p~n",
                                [Entries, Contexts, values(G), maps:get(bad, G)]),
                      lists:all(fun({_, _, E}) -> E =< 2 end, Entries)
                      andalso Contexts =:= [] andalso length(Vals) =:= 1
                      andalso maps:get(bad, G) =:= [])
        end).

run_settled(G0, H) -> settle(lists:foldl(fun run_step/2, G0, H)).

prop_merkle_diff() ->
    ?SAFE_FORALL({Common, OnlyA, OnlyB, Changed, Shape},
                 {list({range(1, 200), range(1, 5)}), list(range(201, 300)),
                  list(range(301, 400)), list(range(1, 200)),
                  {range(2, 5), range(1, 3)}},
        begin
            {F, D} = Shape,
            Base = maps:from_list(Common),
            A = maps:merge(Base, maps:from_list([{K, 1} || K <- OnlyA])),
            B0 = maps:merge(Base, maps:from_list([{K, 1} || K <- OnlyB])),
            B = maps:merge(B0, maps:from_list([{K, 99} || K <- Changed, maps:is_key(K, Base)])),
            Ta = tree(A, F, D),
            Tb = tree(B, F, D),
            Want = lists:sort([K || K <- lists:usort(maps:keys(A) ++ maps:keys(B)),
                                    maps:find(K, A) =/= maps:find(K, B)]),
            Found = exchange(hm_merkle:start(Ta), Tb, Ta),
            ?WHENFAIL(io:format(user, "want ~p~nfound ~p~n", [Want, Found]), Found =:= Want)
        end).

tree(M, F, D) ->
    maps:fold(fun(K, V, T) -> hm_merkle:put(K, hm_merkle:hash(V), T) end,
              hm_merkle:new(#{fanout => F, depth => D}), M).

%% the exchange, alternating sides, until keys or done
exchange(Msg, To, Other) ->
    case hm_merkle:compare(Msg, To) of
        done -> [];
        {keys, Ks} -> Ks;
        {reply, M} -> exchange(M, Other, To)
    end.
