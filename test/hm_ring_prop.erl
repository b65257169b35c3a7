%% @doc PropEr properties of consistent-hash placement ({@link hm_ring}): preference lists of
%% distinct pool nodes that depend only on the pool as a set, and minimal movement when a
%% node joins or leaves. Run through EUnit.
-module(hm_ring_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_preference_list/0, prop_pool_order/0, prop_join_moves_little/0,
         prop_leave_is_reverse/0, prop_fragment/0]).

check(Prop) -> hm_crdt_prop:check(Prop).

all_nodes() -> [list_to_atom("n" ++ integer_to_list(I) ++ "@h") || I <- lists:seq(1, 12)].

pool() -> ?LET(Ns, non_empty(list(elements(all_nodes()))), lists:usort(Ns)).

%% A pool and a node outside it.
pool_and_new() ->
    ?LET(Ns, non_empty(list(elements(tl(all_nodes())))),
         ?LET(New, elements(all_nodes() -- Ns), {lists:usort(Ns), New})).

shape() -> {range(1, 64), range(1, 5)}.         % {F, N}

prop_preference_list() ->
    ?SAFE_FORALL({Pool, {F, N}}, {pool(), shape()},
                 lists:all(fun(K) ->
                                   L = hm_ring:preference_list(hm_ring:new(Pool), {K, F}, N),
                                   length(L) =:= min(N, length(Pool))
                                       andalso lists:usort(L) =:= lists:sort(L)
                                       andalso L -- Pool =:= []
                           end, lists:seq(1, F))).

prop_pool_order() ->
    ?SAFE_FORALL({Pool, {F, N}}, {pool(), shape()},
                 hm_ring:placement(hm_ring:new(Pool), F, N)
                     =:= hm_ring:placement(hm_ring:new(lists:reverse(Pool) ++ Pool), F, N)).

%% A joining node enters some lists; each such list keeps the others' order and drops at
%% most its last node; every other list is unchanged.
prop_join_moves_little() ->
    ?SAFE_FORALL({{Pool, New}, {F, N}}, {pool_and_new(), shape()},
                 begin
                     Old = hm_ring:placement(hm_ring:new(Pool), F, N),
                     Now = hm_ring:placement(hm_ring:new([New | Pool]), F, N),
                     lists:all(fun(K) -> joined(New, maps:get(K, Old), maps:get(K, Now), N)
                               end, lists:seq(1, F))
                 end).

joined(New, Old, Now, N) ->
    case lists:member(New, Now) of
        false -> Now =:= Old;
        true ->
            Rest = Now -- [New],
            lists:prefix(Rest, Old) andalso length(Old) - length(Rest) =< 1
                andalso length(Now) =:= min(N, length(Old) + 1)
    end.

prop_leave_is_reverse() ->
    ?SAFE_FORALL({Pool, {F, N}}, {pool(), shape()},
                 ?IMPLIES(length(Pool) > 1,
                          begin
                              [Gone | Rest] = Pool,
                              Before = hm_ring:placement(hm_ring:new(Pool), F, N),
                              After = hm_ring:placement(hm_ring:new(Rest), F, N),
                              Moves = hm_ring:moves(Before, After),
                              %% only lists that held the leaving node change
                              lists:all(fun({K, Add, Remove}) ->
                                                Remove =:= [Gone]
                                                    andalso length(Add) =< 1
                                                    andalso lists:member(Gone,
                                                                         maps:get(K, Before))
                                        end, Moves)
                          end)).

prop_fragment() ->
    ?SAFE_FORALL({Key, F}, {any(), range(1, 100)},
                 begin
                     K = hm_ec_frag:fragment(Key, F),
                     K >= 1 andalso K =< F andalso K =:= hm_ec_frag:fragment(Key, F)
                 end).

-define(P(Name, Prop), {timeout, 600, {Name, ?_assert(check(Prop))}}).

ring_test_() ->
    [?P("hm_ring: preference lists of N distinct pool nodes", prop_preference_list()),
     ?P("hm_ring: placement depends on the pool as a set", prop_pool_order()),
     ?P("hm_ring: a joining node moves only what it takes", prop_join_moves_little()),
     ?P("hm_ring: a leaving node moves only what it held", prop_leave_is_reverse()),
     ?P("hm_ring: a key's fragment is fixed and in range", prop_fragment())].

%% On 5 nodes, 64 fragments, N = 3: every node holds some copies, none more than twice its
%% share, and a sixth node takes about 1/6 of the copies.
balance_test() ->
    Pool = lists:sublist(all_nodes(), 5),
    P5 = hm_ring:placement(hm_ring:new(Pool), 64, 3),
    Counts = [length([K || {K, Ns} <- maps:to_list(P5), lists:member(Nd, Ns)]) || Nd <- Pool],
    ?assert(lists:all(fun(C) -> C > 0 andalso C =< 2 * 64 * 3 div 5 end, Counts)),
    P6 = hm_ring:placement(hm_ring:new(Pool ++ [lists:nth(6, all_nodes())]), 64, 3),
    Moved = length([A || {_, A, _} <- hm_ring:moves(P5, P6), _ <- A]),
    ?assert(Moved > 0 andalso Moved =< 2 * 64 * 3 div 6).

names_test() ->
    ?assertEqual(t, hm_ec_frag:fragment_name(t, 1)),
    ?assertEqual(t_frag12, hm_ec_frag:fragment_name(t, 12)),
    ?assertEqual([t, t_frag2, t_frag3], hm_ec_frag:fragment_names(t, 3)).
